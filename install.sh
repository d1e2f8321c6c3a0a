#!/bin/sh
# Installs a Constle release for this machine (Linux on x86_64 or aarch64).
#
#   curl --proto '=https' --tlsv1.2 -sSf https://raw.githubusercontent.com/constle/constle/main/install.sh | sh
#
# What it checks before anything is installed:
#   1. With cosign on PATH: the keyless signature on checksums.txt, pinned to
#      the identity of this repository's release workflow on a v* tag and to
#      GitHub's OIDC issuer. A signature that does not verify aborts.
#      Without cosign it says so, and the checksum below is all that is checked.
#   2. The SHA-256 of the archive against its line in checksums.txt. A missing
#      line or a mismatch aborts.
# The binary is then staged in a private directory made by mktemp inside the
# install directory and moved into place with one rename, so an interrupted
# or refused install leaves any earlier constle as it was, and nothing is
# ever written through a link someone planted there.
#
# Settings (environment variables):
#   CONSTLE_VERSION            the release to install, e.g. 0.1.0 (default: the latest)
#   CONSTLE_INSTALL_DIR        where to put the binary (default: $HOME/.local/bin)
#   CONSTLE_REQUIRE_SIGNATURE  1: refuse to install without a verified signature
#   CONSTLE_DOWNLOAD_TIMEOUT   the most seconds each download may take (default: 300);
#                              connecting may take at most 30 of them
#   CONSTLE_BASE_URL           where releases are (default:
#                              https://github.com/constle/constle/releases); a mirror
#                              must keep GitHub's layout: <base>/download/v<version>/<file>
#                              and <base>/latest/download/<file>. https only, except
#                              http://127.0.0.1, http://localhost and http://[::1].
set -eu

# The signer every release must come from. Keyless signing has no fixed key:
# without these two pins cosign accepts a signature made by anyone.
identity_regexp='^https://github\.com/constle/constle/\.github/workflows/release\.yaml@refs/tags/v'
oidc_issuer='https://token.actions.githubusercontent.com'

say() { printf 'install.sh: %s\n' "$*" >&2; }
die() {
  printf 'install.sh: error: %s\n' "$*" >&2
  exit 1
}

base_url=${CONSTLE_BASE_URL:-https://github.com/constle/constle/releases}
base_url=${base_url%/}
version=${CONSTLE_VERSION:-latest}
install_dir=${CONSTLE_INSTALL_DIR:-${HOME:?HOME is not set; set CONSTLE_INSTALL_DIR}/.local/bin}
require_signature=${CONSTLE_REQUIRE_SIGNATURE:-0}
download_timeout=${CONSTLE_DOWNLOAD_TIMEOUT:-300}
connect_timeout=30

case $require_signature in
  0 | 1) ;;
  *) die "CONSTLE_REQUIRE_SIGNATURE must be 0 or 1, not '$require_signature'" ;;
esac
# A whole number of seconds, at least 1: curl reads 0 as "no limit".
case $download_timeout in
  '' | 0* | *[!0-9]*) die "CONSTLE_DOWNLOAD_TIMEOUT must be a whole number of seconds, 1 or more, not '$download_timeout'" ;;
esac
[ "$connect_timeout" -le "$download_timeout" ] || connect_timeout=$download_timeout

# curl's flags: https only (and only https redirects), except for a server on
# this machine, which tests and local mirrors use.
case $base_url in
  *@*) die "CONSTLE_BASE_URL must not contain '@' (user information): $base_url" ;;
  https://?*)
    set -- --proto '=https' --proto-redir '=https' --tlsv1.2 --location
    ;;
  http://127.0.0.1:* | http://127.0.0.1/* | http://127.0.0.1 | \
    http://localhost:* | http://localhost/* | http://localhost | \
    http://\[::1\]:* | http://\[::1\]/* | http://\[::1\])
    say "warning: $base_url is plain http; allowed only because it is this machine"
    set -- --proto '=http'
    ;;
  *) die "CONSTLE_BASE_URL must be an https:// URL (or http:// on 127.0.0.1, localhost or [::1]): $base_url" ;;
esac

case $version in
  latest) release_url=$base_url/latest/download ;;
  v*) version=${version#v} ;;
esac
case $version in
  latest) ;;
  '' | *[!0-9A-Za-z.+-]*) die "CONSTLE_VERSION is not a version number: '${CONSTLE_VERSION:-}'" ;;
  *) release_url=$base_url/download/v$version ;;
esac

os=$(uname -s)
[ "$os" = Linux ] || die "releases are built for Linux only; this is $os"
machine=$(uname -m)
case $machine in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) die "no release is built for this machine ($machine); there are archives for x86_64 (amd64) and aarch64 (arm64) only" ;;
esac

command -v curl >/dev/null 2>&1 || die "curl is needed to download the release"
command -v tar >/dev/null 2>&1 || die "tar is needed to unpack the release"
if command -v sha256sum >/dev/null 2>&1; then
  sha256() { sha256sum <"$1" | cut -d ' ' -f 1; }
elif command -v shasum >/dev/null 2>&1; then
  sha256() { shasum -a 256 <"$1" | cut -d ' ' -f 1; }
else
  die "sha256sum (or shasum) is needed to check the archive"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/constle-install.XXXXXX")
staged=
cleanup() {
  rm -rf "$tmp"
  if [ -n "$staged" ]; then rm -rf "$staged"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fetch FILE: downloads $release_url/FILE into $tmp/FILE; fails without a
# message, for the caller to explain, except when it runs out of time: a
# server that accepts and never answers would otherwise hang the install.
fetch() {
  curl --fail --silent --show-error "$@" \
    --connect-timeout "$connect_timeout" --max-time "$download_timeout" \
    --output "$tmp/$file" "$release_url/$file" 2>"$tmp/curl.err" && return 0
  status=$?
  # 28 is curl's "operation timed out", for connecting or for the whole.
  [ "$status" -ne 28 ] || die "timed out after $download_timeout s (at most $connect_timeout s to connect) downloading $release_url/$file: $(cat "$tmp/curl.err"); check the network or the mirror, or allow more time with CONSTLE_DOWNLOAD_TIMEOUT; nothing installed"
  return "$status"
}

# get FILE: fetch, or abort saying what could not be downloaded from where.
get() {
  file=$1
  shift
  fetch "$@" || die "could not download $release_url/$file: $(cat "$tmp/curl.err")"
}

# try FILE: fetch; status 1 if it is not there (HTTP 404), abort on any other failure.
try() {
  file=$1
  shift
  if fetch "$@"; then return 0; fi
  if grep -q 'error: 404' "$tmp/curl.err"; then return 1; fi
  die "could not download $release_url/$file: $(cat "$tmp/curl.err")"
}

say "release: $release_url"
get checksums.txt "$@"

# 1. The signature on checksums.txt.
signature=none
if try checksums.txt.sig "$@"; then
  try checksums.txt.pem "$@" || die "$release_url has checksums.txt.sig but no checksums.txt.pem (the signing certificate); nothing installed"
  signature=published
fi
if [ "$signature" = published ] && command -v cosign >/dev/null 2>&1; then
  say "verifying the signature on checksums.txt with cosign"
  if ! cosign verify-blob \
    --certificate "$tmp/checksums.txt.pem" --signature "$tmp/checksums.txt.sig" \
    --certificate-identity-regexp "$identity_regexp" \
    --certificate-oidc-issuer "$oidc_issuer" \
    "$tmp/checksums.txt" >"$tmp/cosign.out" 2>&1; then
    sed 's/^/  cosign: /' "$tmp/cosign.out" >&2
    die "the signature on $release_url/checksums.txt did not verify (signer must be $identity_regexp, issuer $oidc_issuer); nothing installed"
  fi
  signature=verified
  say "signature verified: checksums.txt was signed by constle/constle's release workflow"
elif [ "$signature" = published ]; then
  [ "$require_signature" = 0 ] || die "CONSTLE_REQUIRE_SIGNATURE=1, but cosign is not on PATH, so the signature cannot be verified; install cosign (https://docs.sigstore.dev) and run again. Nothing installed"
  say "warning: cosign is not on PATH: the signature on checksums.txt is NOT checked; only the SHA-256 from checksums.txt is enforced"
else
  [ "$require_signature" = 0 ] || die "CONSTLE_REQUIRE_SIGNATURE=1, but $release_url has no checksums.txt.sig; nothing installed"
  say "warning: $release_url publishes no signature (checksums.txt.sig): only the SHA-256 from checksums.txt is enforced"
fi

# Which archive: the one named for this machine in checksums.txt (for
# "latest", that line also tells which version it is).
if [ "$version" = latest ]; then
  archive=$(awk -v arch="$arch" '
    { name = $2; sub(/^\*/, "", name) }
    name ~ "^constle_[0-9A-Za-z.+-]+_linux_" arch "\\.tar\\.gz$" { print name }
  ' "$tmp/checksums.txt")
  case $archive in
    '') die "checksums.txt at $release_url has no line for a linux $arch archive; nothing installed" ;;
    *"
"*) die "checksums.txt at $release_url names more than one linux $arch archive; nothing installed" ;;
  esac
  version=${archive#constle_}
  version=${version%_linux_"$arch".tar.gz}
else
  archive=constle_${version}_linux_$arch.tar.gz
fi

# 2. The archive's SHA-256.
want=$(awk -v name="$archive" '{ n = $2; sub(/^\*/, "", n) } n == name { print $1 }' "$tmp/checksums.txt")
case $want in
  '') die "checksums.txt at $release_url has no line for $archive; nothing installed" ;;
  *"
"*) die "checksums.txt at $release_url has more than one line for $archive; nothing installed" ;;
  *[!0-9a-f]*) die "checksums.txt at $release_url has a malformed SHA-256 for $archive: $want; nothing installed" ;;
esac
[ ${#want} -eq 64 ] || die "checksums.txt at $release_url has a malformed SHA-256 for $archive: $want; nothing installed"

get "$archive" "$@"
got=$(sha256 "$tmp/$archive")
[ "$got" = "$want" ] || die "SHA-256 mismatch for $release_url/$archive: checksums.txt says $want, the download is $got; nothing installed"
say "checksum OK: $archive"

# 3. Unpack the one file wanted and move it into place.
mkdir "$tmp/unpacked"
member=constle_${version}_linux_$arch/constle
tar -xzf "$tmp/$archive" -C "$tmp/unpacked" "$member" 2>"$tmp/tar.err" ||
  die "$archive does not hold $member: $(cat "$tmp/tar.err"); nothing installed"
if [ ! -f "$tmp/unpacked/$member" ] || [ -L "$tmp/unpacked/$member" ]; then
  die "$member in $archive is not a regular file; nothing installed"
fi

mkdir -p "$install_dir" || die "cannot create the install directory $install_dir"
# mv onto a directory (or a link to one) moves the file inside it: the
# install would "succeed" with no constle where PATH looks for it.
[ ! -d "$install_dir/constle" ] || die "$install_dir/constle is a directory (or a link to one), not the constle binary; move it aside and run again. Nothing installed"
# A fresh directory only this user can enter, on the install directory's
# file system (so the last step is a rename): no one can plant a link for
# cp or chmod to follow.
staged=$(mktemp -d "$install_dir/.constle.install.XXXXXX") || die "cannot write to $install_dir"
cp "$tmp/unpacked/$member" "$staged/constle" || die "cannot write to $install_dir"
chmod 755 "$staged/constle"
mv -f "$staged/constle" "$install_dir/constle" || die "cannot move the binary into place as $install_dir/constle"
rmdir "$staged"
staged=

case $signature in
  verified) how="signature and checksum verified" ;;
  *) how="checksum verified; signature NOT verified" ;;
esac
say "installed constle $version ($arch) as $install_dir/constle ($how)"
case ":${PATH:-}:" in
  *":$install_dir:"*) ;;
  *) say "note: $install_dir is not on your PATH" ;;
esac
