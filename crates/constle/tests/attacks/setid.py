"""Set-user-ID and set-group-ID files: every way an agent might leave one in
its work directory, for the host to find there after the run (owned by root
on disk when constle runs as root).

Each attempt works on a copy of /bin/sh, the program a set-user-ID file
would be worth having for.
"""

import os
import shutil
import stat
import tarfile

from probe import row, tool

SH = "/bin/sh"


def copy(name):
    shutil.copy(SH, name)
    return name


def setuid_binary():
    """A host binary that is set-user-ID, to copy or link."""
    for path in ("/usr/bin/su", "/usr/bin/passwd", "/bin/su"):
        if os.path.exists(path) and os.stat(path).st_mode & stat.S_ISUID:
            return path
    return None


def create(name, mode):
    os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_EXCL, mode))


def tmpfile_linked(mode):
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, mode)
    try:
        os.link(f"/proc/self/fd/{fd}", "tmpfile-setgid", follow_symlinks=True)
    finally:
        os.close(fd)


def tar_extract():
    copy("tar-src")
    with tarfile.open("setid.tar", "w") as t:
        info = t.gettarinfo("tar-src", arcname="tar-setuid")
        info.mode = 0o4755
        with open("tar-src", "rb") as f:
            t.addfile(info, f)
    if not shutil.which("tar"):
        return "absent"
    return tool("tar", "-xpf", "setid.tar")


def hard_link(name):
    def attempt():
        target = next((p for p in (f"/usr/bin/{name}", f"/bin/{name}") if os.path.exists(p)),
                      None)
        if target is None:
            return "absent"
        os.link(target, f"link-{name}")
    return attempt


def capability():
    copy("cap-sh")
    # VFS_CAP_REVISION_2 with CAP_SETUID permitted and effective.
    value = (0x02000001).to_bytes(4, "little") + (1 << 7).to_bytes(4, "little") + bytes(12)
    os.setxattr("cap-sh", "security.capability", value)


def setgid_dir():
    os.mkdir("setgid-dir")
    os.chmod("setgid-dir", 0o2775)


def found():
    names = [n for n in os.listdir(".")
             if not os.path.isdir(n) and os.lstat(n).st_mode & (stat.S_ISUID | stat.S_ISGID)]
    return ",".join(sorted(names)) or "none"


row("chmod u+s", lambda: os.chmod(copy("chmod-setuid"), 0o4755))
row("chmod g+s", lambda: os.chmod(copy("chmod-setgid"), 0o2755))
row("chmod(1) 4755", lambda: tool("chmod", "4755", copy("chmod1-setuid")))
row("open O_CREAT 04755", lambda: create("open-setuid", 0o4755))
row("open O_CREAT 02755", lambda: create("open-setgid", 0o2755))
row("open O_TMPFILE 02755, then link", lambda: tmpfile_linked(0o2755))
row("mknod regular 04755", lambda: os.mknod("mknod-setuid", stat.S_IFREG | 0o4755))
row("install -m 4755", lambda: tool("install", "-m", "4755", SH, "install-setuid"))
def cp_p():
    source = setuid_binary()
    if source is None:
        return "absent"
    result = tool("cp", "-p", source, "cp-setuid")
    if result != "OK":
        return result
    kept = os.lstat("cp-setuid").st_mode & (stat.S_ISUID | stat.S_ISGID)
    return "copied with set-id bits" if kept else "copied without set-id bits"


row("cp -p of a set-user-ID binary", cp_p)
row("tar -xp of a set-user-ID entry", tar_extract)
row("hard link to su", hard_link("su"))
row("hard link to passwd", hard_link("passwd"))
row("file capability CAP_SETUID", capability)
row("set-group-ID directory", setgid_dir)
row("set-id files left", found)
