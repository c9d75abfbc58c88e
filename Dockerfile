# Muster's image: `docker build -t REGISTRY/muster:TAG .` (see README "Install on a cluster").
#
# Two stages: wheels are built in the first, so the final image holds only the installed
# package and its dependencies (no pip cache, no build tree, no compilers).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A fixed numeric non-root user, so runAsNonRoot can verify it (deploy/ sets 10001 too).
RUN groupadd --system --gid 10001 muster \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin muster
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels muster && rm -rf /wheels
USER 10001:10001
# 8888: the extender (kube-scheduler; HTTPS with client certificates under --client-ca);
# 8443: the admission webhooks (HTTPS); 9090: ops (--ops-listen: health, metrics, debug).
EXPOSE 8888 8443 9090
ENTRYPOINT ["muster"]
CMD ["serve", "--in-cluster", "--host=0.0.0.0", "--port=8888"]
