#!/usr/bin/env bash
# Build and install pgvector for the machine's PostgreSQL 15 (Debian 12 packages none for it).
#
# Source: Debian's newer pgvector source package (trixie), fetched from the machine's own
# Debian mirror through a throw-away apt configuration, so the machine's apt state is left
# as it was. Skipped when the extension is already installed.
#
# Environment: PG_MAJOR (default 15), PGVECTOR_SUITE (default trixie),
# DEBIAN_MIRROR (default: the first non-security Debian URI of the machine's apt sources).
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
SUITE=${PGVECTOR_SUITE:-trixie}
PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
CONTROL=/usr/share/postgresql/$PG_MAJOR/extension/vector.control

if [ -f "$CONTROL" ]; then
  echo "pgvector: already installed for PostgreSQL $PG_MAJOR ($CONTROL)"
  exit 0
fi
started=$SECONDS

# The Debian mirror this machine uses: deb822 sources first, then one-line sources.list.
debian_mirror() {
  local files=()
  shopt -s nullglob
  files=(/etc/apt/sources.list.d/*.sources)
  shopt -u nullglob
  if [ ${#files[@]} -gt 0 ]; then
    # One stanza per paragraph; take the URIs of a "deb" stanza whose suites include a plain
    # release name (no "-security" / "-updates").
    awk '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && suites ~ /(^| )[a-z]+( |$)/ && uris != "") { split(uris, u, " "); print u[1]; found = 1; exit }
        types = ""; uris = ""; suites = ""
      }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]*#/ { next }
      tolower($1) == "types:"  { $1 = ""; types = $0 }
      tolower($1) == "uris:"   { $1 = ""; uris = $0 }
      tolower($1) == "suites:" { $1 = ""; suites = $0 }
      END { flush() }
    ' <(for f in "${files[@]}"; do cat "$f"; echo; done) | head -n 1
  fi
  if [ -f /etc/apt/sources.list ]; then
    # deb [options] URI suite components...
    sed -E -n 's/^[ \t]*deb[ \t]+(\[[^]]*\][ \t]+)?([^ \t]+)[ \t]+([a-z]+)([ \t].*)?$/\2/p' /etc/apt/sources.list | head -n 1
  fi
}

MIRROR=${DEBIAN_MIRROR:-$(debian_mirror | head -n 1)}
MIRROR=${MIRROR%/}
if [ -z "$MIRROR" ]; then
  echo "pgvector: no Debian mirror found in the machine's apt sources (set DEBIAN_MIRROR)" >&2
  exit 1
fi
echo "pgvector: building for PostgreSQL $PG_MAJOR from Debian $SUITE's source package"

export DEBIAN_FRONTEND=noninteractive
if [ ! -x "$PG_CONFIG" ] || [ ! -d "/usr/include/postgresql/$PG_MAJOR/server" ]; then
  echo "pgvector: installing postgresql-server-dev-$PG_MAJOR"
  if ! apt-get install -y -qq --no-install-recommends "postgresql-server-dev-$PG_MAJOR" make gcc >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "postgresql-server-dev-$PG_MAJOR" make gcc >/dev/null
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/etc/sources.list.d" "$work/etc/preferences.d" "$work/lists/partial" \
  "$work/cache/archives/partial" "$work/src"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ -f "$keyring" ]; then
  echo "deb-src [signed-by=$keyring] $MIRROR $SUITE main" >"$work/etc/sources.list"
else
  echo "deb-src $MIRROR $SUITE main" >"$work/etc/sources.list"
fi
# apt drops privileges to _apt for downloads; let it write here.
chmod -R a+rwX "$work"
apt_tmp=(
  -o "Dir::Etc::SourceList=$work/etc/sources.list"
  -o "Dir::Etc::SourceParts=$work/etc/sources.list.d"
  -o "Dir::Etc::PreferencesParts=$work/etc/preferences.d"
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache=$work/cache"
  -o "Dir::Cache::pkgcache="
  -o "Dir::Cache::srcpkgcache="
  -o "APT::Get::List-Cleanup=0"
)
apt-get "${apt_tmp[@]}" update -qq
(cd "$work/src" && apt-get "${apt_tmp[@]}" source --download-only -qq pgvector)

orig=$(find "$work/src" -maxdepth 1 -name 'pgvector_*.orig.tar.*' | head -n 1)
if [ -z "$orig" ]; then
  echo "pgvector: no orig tarball downloaded:" >&2
  ls -l "$work/src" >&2
  exit 1
fi
echo "pgvector: $(basename "$orig")"
mkdir "$work/build"
tar -xf "$orig" -C "$work/build" --strip-components=1

jobs=$(nproc 2>/dev/null || echo 2)
make -s -C "$work/build" -j "$jobs" PG_CONFIG="$PG_CONFIG" >/dev/null
make -s -C "$work/build" install PG_CONFIG="$PG_CONFIG" >/dev/null

if [ ! -f "$CONTROL" ]; then
  echo "pgvector: make install did not install $CONTROL" >&2
  exit 1
fi
echo "pgvector: installed $(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$CONTROL") in $((SECONDS - started)) s"
