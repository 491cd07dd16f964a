#!/usr/bin/env bash
# Build pykatalyst's OCI image with no container engine:
#
#   bash scripts/image.sh [OUT_DIR]        # default build/image
#
# 1. Debian bookworm's Python 3.11 and the libraries it links, as .debs from the Debian
#    archive (`apt-get download`, kept in the cache dir), unpacked with `dpkg-deb -x` into a
#    merged-/usr root filesystem. No shell, no package manager: only what Python needs.
# 2. The project's wheel with its [kube] extra, installed into that tree's
#    /usr/local/lib/python3.11/dist-packages by pip (binary wheels for CPython 3.11 on
#    manylinux x86_64, versions pinned by constraints.txt), and /usr/local/bin/katalyst.
# 3. `katalyst --help` run inside the tree (chroot, when run as root) as a smoke test.
# 4. scripts/oci_image.py writes it as one layer: OUT_DIR/pykatalyst.tar (OCI archive, what
#    `ctr images import` and registries' tools read) and OUT_DIR/layout (OCI layout).
#    Reproducible: sorted entries, owner root, every mtime zero.
#
# The image runs as uid 65532 with ENTRYPOINT katalyst; the chart runs the agent as root.
# Environment: PYKATALYST_IMAGE (name, default docker.io/library/pykatalyst:<version>,
# which pods name as pykatalyst:<version>), PYKATALYST_IMAGE_CACHE
# (downloads, default ~/.cache/pykatalyst-image), PYTHON (a python with pip, default .venv).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/build/image}"
CACHE="${PYKATALYST_IMAGE_CACHE:-$HOME/.cache/pykatalyst-image}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1)"
# fully qualified: the CRI looks an imported image up by its normalized name
NAME="${PYKATALYST_IMAGE:-docker.io/library/pykatalyst:$VERSION}"
# python3.11 and what it loads (apt-cache depends --recurse, less dpkg, perl and docs)
DEBS=(
  libc6 libgcc-s1 gcc-12-base libstdc++6 zlib1g libexpat1 libbz2-1.0 liblzma5 libcrypt1
  libffi8 libssl3 libsqlite3-0 libuuid1 libdb5.3 libncursesw6 libtinfo6 libreadline8
  readline-common libnsl2 libtirpc3 libtirpc-common libgssapi-krb5-2 libkrb5-3
  libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 media-types netbase
  tzdata python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
)

command -v dpkg-deb >/dev/null || { echo "image.sh: needs dpkg-deb (Debian/Ubuntu)" >&2; exit 2; }
"$PY" -m pip --version >/dev/null || { echo "image.sh: $PY has no pip (bash scripts/setup.sh)" >&2; exit 2; }

mkdir -p "$CACHE/debs" "$OUT"
missing=()
for p in "${DEBS[@]}"; do
  compgen -G "$CACHE/debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  (cd "$CACHE/debs" && apt-get download "${missing[@]}")
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RFS="$WORK/rootfs"
mkdir -p "$RFS"
for p in "${DEBS[@]}"; do
  dpkg-deb -x "$(ls "$CACHE/debs/${p}"_*.deb | sort | tail -1)" "$RFS"
done
# merged /usr: /bin, /lib, /lib64 and /sbin are links into /usr, as on a Debian system
for d in bin lib lib64 sbin; do
  if [ -d "$RFS/$d" ] && [ ! -L "$RFS/$d" ]; then
    mkdir -p "$RFS/usr/$d"
    cp -a "$RFS/$d/." "$RFS/usr/$d/"
    rm -rf "${RFS:?}/$d"
  fi
  mkdir -p "$RFS/usr/$d"
  ln -s "usr/$d" "$RFS/$d"
done
rm -rf "$RFS"/usr/share/{doc,man,info,lintian,locale} "$RFS"/etc/{init.d,logrotate.d,cron.d}
ln -sf python3.11 "$RFS/usr/bin/python3"
mkdir -p "$RFS"/{tmp,proc,sys,dev,etc,root,var/lib/pykatalyst}
chmod 1777 "$RFS/tmp"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nkatalyst:x:65532:65532::/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n' >"$RFS/etc/passwd"
printf 'root:x:0:\nkatalyst:x:65532:\nnogroup:x:65534:\n' >"$RFS/etc/group"

# the project's wheel (built at a fixed path, so pip's records do not vary)
WHEELS="$CACHE/wheel"
rm -rf "$WHEELS" && mkdir -p "$WHEELS"
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" "$ROOT"
WHEEL="$(ls "$WHEELS"/pykatalyst-*.whl)"
SITE="$RFS/usr/local/lib/python3.11/dist-packages"
"$PY" -m pip install --quiet --no-compile --no-warn-script-location --disable-pip-version-check \
  --target "$SITE" --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  --python-version 3.11 --implementation cp --abi cp311 --only-binary=:all: \
  --constraint "$ROOT/constraints.txt" "pykatalyst[kube] @ file://$WHEEL"
rm -rf "$SITE/bin"
find "$SITE" -name __pycache__ -prune -exec rm -rf {} +
# where the wheel came from, with the hash of its zip (which holds build times): not kept
find "$SITE" -name direct_url.json -delete
sed -i '/direct_url\.json,/d' "$SITE"/*.dist-info/RECORD
mkdir -p "$RFS/usr/local/bin"
printf '#!/usr/bin/python3.11\nimport sys\n\nfrom pykatalyst.cli.main import app\n\nsys.exit(app())\n' \
  >"$RFS/usr/local/bin/katalyst"
chmod 755 "$RFS/usr/local/bin/katalyst"

if [ "$(id -u)" = 0 ] && command -v chroot >/dev/null; then
  chroot "$RFS" /usr/local/bin/katalyst --help >/dev/null
  chroot --userspec=65532:65532 "$RFS" /usr/bin/python3.11 -c \
    'import kubernetes, numpy, pydantic, aiohttp, pykatalyst.cli.main'
  echo "image.sh: katalyst runs in the image's root filesystem"
fi

python3 "$ROOT/scripts/oci_image.py" --name "$NAME" --rootfs "$RFS" \
  --out "$OUT/pykatalyst.tar" --layout "$OUT/layout" \
  --entrypoint /usr/local/bin/katalyst --user 65532:65532 \
  --env PATH=/usr/local/bin:/usr/bin:/bin --env PYTHONUNBUFFERED=1 \
  --env PYTHONDONTWRITEBYTECODE=1 --cmd --help
echo "image.sh: $NAME: $OUT/pykatalyst.tar ($(du -h "$OUT/pykatalyst.tar" | cut -f1) compressed," \
  "$(du -sh "$RFS" | cut -f1) unpacked)"
sha256sum "$OUT/pykatalyst.tar"
