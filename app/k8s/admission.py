"""Keep ``BindAdmission`` in step with the admission configurations the API server serves.

Discovery and the list+watch loops are ``app.k8s.served.ServedKinds``'s, over
``app.core.model.admissionrules.ADMISSION_KINDS`` (webhook configurations, and admission
policies where the API serves them); each configuration listed or changed is read by
``binding_matchers``. ``BindAdmission`` is told the lists are complete once every served kind
has been listed (until then, and for good if they cannot be listed, gangs keep their dry
runs), and asks ``healthy`` whether every loop still works (while one fails, they keep them
too).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Unpack

from app.core.model.admissionrules import ADMISSION_KINDS, AdmissionKind, binding_matchers
from app.core.state.bindadmission import BindAdmission
from app.k8s.reflector import meta_of
from app.k8s.served import GroupApi, LoopOptions, ServedKinds


class AdmissionSync(ServedKinds[AdmissionKind]):
    """List+watch loops for the admission configurations, feeding ``admission``."""

    #: A kind not asked about might see Bindings: the lists are complete only without errors.
    READY_DESPITE_ERRORS = False

    def __init__(
        self,
        admission: BindAdmission,
        api: GroupApi,
        *,
        kinds: Iterable[AdmissionKind] = ADMISSION_KINDS,
        **options: Unpack[LoopOptions],
    ) -> None:
        # Configurations change rarely: a watch a minute long (the loops' default is 5 s).
        paced: LoopOptions = {"watch_timeout": 60, **options}
        super().__init__(api, kinds, name="admission", what="admission configurations", **paced)
        self._admission = admission
        self.on_ready = admission.mark_known
        admission.watch_health(self.healthy)

    def _replace(self, kind: AdmissionKind, api_version: str, items: list[dict[str, Any]]) -> int:
        self._admission.replace(
            kind.source, {_name(obj): binding_matchers(obj, kind) for obj in items}
        )
        return len(items)

    def _upsert(self, kind: AdmissionKind, api_version: str, obj: dict[str, Any]) -> None:
        self._admission.upsert(kind.source, _name(obj), binding_matchers(obj, kind))

    def _delete(self, kind: AdmissionKind, api_version: str, obj: dict[str, Any]) -> None:
        self._admission.delete(kind.source, _name(obj))

    def _dropped(self, kind: AdmissionKind) -> None:
        self._admission.drop(kind.source)


def _name(obj: dict[str, Any]) -> str:
    return str(meta_of(obj).get("name", ""))
