"""What the clients tests' simulated site serves, built on the host.

Usage: site.py KIND ROOT HOST GREETING

Writes into ROOT the files a client of KIND fetches from https://HOST/, each
way leading to GREETING:

- files: hello.txt, holding it;
- pypi: a package index (PEP 503 "simple" pages) with one wheel,
  constle-probe 1.0, whose module constle_probe has it as GREETING;
- npm: a registry's document for the package constle-probe and its
  tarball, whose main module exports it as greeting;
- git: probe.git, a bare repository with one commit of a README holding it,
  made ready for Git's "dumb" HTTP protocol (static files only).
"""

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile

KIND, ROOT, HOST, GREETING = sys.argv[1:]


def write(path, data):
    path = os.path.join(ROOT, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def files():
    write("hello.txt", GREETING + "\n")


def pypi():
    name = "constle_probe-1.0-py3-none-any.whl"
    wheel = wheel_bytes()
    digest = hashlib.sha256(wheel).hexdigest()
    write(f"packages/{name}", wheel)
    write(
        "simple/constle-probe/index.html",
        f'<!DOCTYPE html><html><body><a href="/packages/{name}#sha256={digest}">{name}</a></body></html>\n',
    )


def wheel_bytes():
    dist = "constle_probe-1.0.dist-info"
    members = {
        "constle_probe/__init__.py": f"GREETING = {GREETING!r}\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: constle-probe\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: constle-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={record_hash(data)},{len(data)}" for path, data in members.items()]
    members[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for path, data in members.items():
            z.writestr(path, data)
    return out.getvalue()


def record_hash(data):
    digest = hashlib.sha256(data.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def npm():
    manifest = {"name": "constle-probe", "version": "1.0.0", "main": "index.js"}
    tarball = npm_tarball(manifest)
    name = "constle-probe-1.0.0.tgz"
    write(f"tarballs/{name}", tarball)
    dist = {
        "tarball": f"https://{HOST}/tarballs/{name}",
        "shasum": hashlib.sha1(tarball).hexdigest(),
        "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode(),
    }
    document = {
        "name": "constle-probe",
        "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": dict(manifest, dist=dist)},
    }
    write("constle-probe", json.dumps(document))


def npm_tarball(manifest):
    members = {
        "package/package.json": json.dumps(manifest),
        "package/index.js": f"module.exports = {{ greeting: {json.dumps(GREETING)} }};\n",
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path, data in members.items():
            info = tarfile.TarInfo(path)
            info.size = len(data.encode())
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data.encode()))
    return out.getvalue()


def git():
    def run(*args):
        subprocess.run(["git", *args], check=True, stdin=subprocess.DEVNULL)

    with tempfile.TemporaryDirectory() as work:
        run("init", "-q", "-b", "main", work)
        with open(os.path.join(work, "README"), "w") as f:
            f.write(GREETING + "\n")
        run("-C", work, "add", "README")
        identity = ["-c", "user.name=constle tests", "-c", "user.email=tests@example.test"]
        run("-C", work, *identity, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "probe")
        bare = os.path.join(ROOT, "probe.git")
        run("clone", "-q", "--bare", work, bare)
        # info/refs and objects/info/packs: what a dumb-HTTP client reads
        # instead of asking a server program.
        run("-C", bare, "update-server-info")


{"files": files, "pypi": pypi, "npm": npm, "git": git}[KIND]()
