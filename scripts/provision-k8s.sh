#!/usr/bin/env bash
# Provision a loopback-only Kubernetes control plane for Muster's e2e tests:
# etcd (Debian's etcd-server) plus kube-apiserver and kube-scheduler 1.20.2 built from
# Debian's `kubernetes` source package with Debian's Go 1.19.
#
# Binaries land in ${MUSTER_CACHE:-$HOME/.cache/muster}/k8s-1.20.2/bin. Idempotent: when the
# binaries run and etcd is on PATH, the script exits at once. Needs root (apt) on a fresh
# machine; only the Debian package registry is used. See docs in DESIGN.md section 5.
set -euo pipefail

CACHE="${MUSTER_CACHE:-$HOME/.cache/muster}"
K8S_VERSION="1.20.2"
BIN_DIR="$CACHE/k8s-$K8S_VERSION/bin"
BUILD_DIR="$CACHE/build-k8s-$K8S_VERSION"
# Bump when the build recipe changes: binaries without this stamp are rebuilt.
BUILD_STAMP="$CACHE/k8s-$K8S_VERSION/BUILD_RECIPE"
RECIPE="2: vendored reflect2 replaced by Debian's 1.0.2"
REFLECT2_SRC="/usr/share/gocode/src/github.com/modern-go/reflect2"
APT_SOURCES="/etc/apt/sources.list.d/debian.sources"
PACKAGES=(etcd-server golang-1.19-go golang-github-modern-go-reflect2-dev rsync jq dpkg-dev
    openssl make)
# kubectl (Debian's kubernetes-client, 1.20.2, with kustomize built in) renders and dry-runs
# deploy/. Any kubectl already on PATH will do; installing Debian's over another package's
# /usr/bin/kubectl would fail.
command -v kubectl >/dev/null 2>&1 || PACKAGES+=(kubernetes-client)
GO_BIN="/usr/lib/go-1.19/bin"

log() { printf '[provision-k8s %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

binaries_ready() {
    [[ -f "$BUILD_STAMP" && "$(cat "$BUILD_STAMP")" == "$RECIPE" ]] &&
        [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/kube-scheduler" ]] &&
        "$BIN_DIR/kube-apiserver" --version >/dev/null 2>&1 &&
        "$BIN_DIR/kube-scheduler" --version >/dev/null 2>&1
}

if binaries_ready && command -v etcd >/dev/null 2>&1 && command -v kubectl >/dev/null 2>&1; then
    echo "$BIN_DIR"
    exit 0
fi

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

enable_deb_src() {
    if [[ -f "$APT_SOURCES" ]]; then
        if grep -qE '^Types:[[:space:]]*deb[[:space:]]*$' "$APT_SOURCES"; then
            log "enabling deb-src in $APT_SOURCES"
            as_root sed -i -E 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb deb-src/' \
                "$APT_SOURCES"
        fi
    elif [[ -f /etc/apt/sources.list ]] && ! grep -qE '^deb-src ' /etc/apt/sources.list; then
        log "enabling deb-src in /etc/apt/sources.list"
        grep -E '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' |
            as_root tee -a /etc/apt/sources.list >/dev/null
    fi
}

install_packages() {
    log "apt-get update"
    as_root apt-get update -qq
    log "installing ${PACKAGES[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${PACKAGES[@]}" >/dev/null
}

fetch_source() {
    # Always a fresh tree: a failed build leaves generated files behind that break the next one.
    remove_build_tree
    mkdir -p "$BUILD_DIR"
    log "apt-get source kubernetes (into $BUILD_DIR)"
    (cd "$BUILD_DIR" && apt-get source -qq kubernetes >/dev/null)
    SRC_DIR="$(find "$BUILD_DIR" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
    if [[ -z "$SRC_DIR" ]]; then
        echo "no kubernetes-* source tree under $BUILD_DIR" >&2
        exit 1
    fi
    log "source tree: $SRC_DIR"
}

patch_vendor() {
    # Kubernetes 1.20 vendors reflect2 1.0.1, whose unsafe map iteration faults under Go >= 1.18
    # ("unexpected fault address" in mapiterinit, e.g. when the apiserver decodes a custom
    # resource). 1.0.2 fixes it with the same API; Debian ships it as source.
    local vendored="$SRC_DIR/vendor/github.com/modern-go/reflect2"
    if [[ ! -d "$REFLECT2_SRC" || ! -d "$vendored" ]]; then
        echo "cannot patch reflect2: $REFLECT2_SRC or $vendored missing" >&2
        exit 1
    fi
    log "replacing vendored reflect2 with $(dpkg-query -W -f='${Version}' \
        golang-github-modern-go-reflect2-dev) from Debian"
    rm -rf "$vendored"
    mkdir -p "$vendored"
    # Every non-test file: the package needs its (empty) assembly stubs for go:linkname.
    find -L "$REFLECT2_SRC" -maxdepth 1 -type f ! -name '*_test.go' -exec cp {} "$vendored/" \;
}

build() {
    cd "$SRC_DIR"
    mkdir -p .go/src/k8s.io
    ln -sfn "$SRC_DIR" .go/src/k8s.io/kubernetes
    log "building kube-scheduler and kube-apiserver (several minutes)"
    GOPATH="$PWD/.go" GOCACHE="$BUILD_DIR/.gocache" GOFLAGS="" \
        PATH="$GO_BIN:$PATH" CGO_ENABLED=0 \
        make WHAT="cmd/kube-scheduler cmd/kube-apiserver"
    mkdir -p "$BIN_DIR"
    local name path
    for name in kube-apiserver kube-scheduler; do
        path="$(find "$SRC_DIR/_output" -type f -name "$name" -perm -u+x | head -n1)"
        if [[ -z "$path" ]]; then
            echo "build produced no $name" >&2
            exit 1
        fi
        # Copy then rename, so processes still running the old binary are unaffected.
        install -m 0755 "$path" "$BIN_DIR/.$name.new"
        mv -f "$BIN_DIR/.$name.new" "$BIN_DIR/$name"
    done
    echo "$RECIPE" >"$BUILD_STAMP"
}

remove_build_tree() {
    cd "$CACHE"
    # Some files in Go caches are read-only; make them writable before removal.
    [[ -d "$BUILD_DIR" ]] && chmod -R u+w "$BUILD_DIR"
    rm -rf "$BUILD_DIR"
}

mkdir -p "$CACHE"
# Concurrent runs (parallel test sessions) wait for each other instead of sharing a build tree.
exec 9>"$CACHE/.provision.lock"
if ! flock -n 9; then
    log "another provisioning run holds $CACHE/.provision.lock; waiting"
    flock 9
fi
if ! binaries_ready; then
    enable_deb_src
    install_packages
    fetch_source
    patch_vendor
    build
    log "removing build tree and Go caches"
    remove_build_tree
elif ! command -v etcd >/dev/null 2>&1 || ! command -v kubectl >/dev/null 2>&1; then
    install_packages
fi

binaries_ready || { echo "kube binaries do not run after provisioning" >&2; exit 1; }
command -v etcd >/dev/null 2>&1 || { echo "etcd not on PATH after provisioning" >&2; exit 1; }
command -v kubectl >/dev/null 2>&1 || { echo "kubectl not on PATH after provisioning" >&2; exit 1; }
log "kube-apiserver: $("$BIN_DIR/kube-apiserver" --version)"
log "kube-scheduler: $("$BIN_DIR/kube-scheduler" --version)"
log "etcd: $(etcd --version | head -n1)"
log "kubectl: $(kubectl version --client 2>/dev/null | head -n1)"
echo "$BIN_DIR"
