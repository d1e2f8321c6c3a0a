"""What an agent leaves in its work directory for the operator's own tools
to run after the run, on the host and outside any sandbox, and what it
does to files it did not make.

Modes (the first argument):
- `git TRIPPED`: a repository with a commit, a branch and `git config
  user.name` (what an agent may do), then every implicit way git runs a
  program: core.fsmonitor, core.pager, pager.<cmd>, core.editor,
  core.sshCommand, diff.external, a diff and a filter driver with
  .gitattributes, an alias, an include of a planted file, core.hooksPath,
  hooks (one of them the operator's, changed); plus the files editors,
  shells and agent CLIs act on when a directory is opened. Every planted
  program appends to TRIPPED, a host path the sandbox cannot see.
- `perms`: the work directory and new files left writable by anyone.
- `read-only`: the operator's read-only inputs, written every way.
- `tmpfs`: the sandbox's file systems in memory, filled past their bounds.
- `inotify-hog` / `inotify-one`: every inotify instance the kernel allows a
  user, held; or just one.
"""

import ctypes
import errno
import json
import os
import stat
import subprocess
import sys
import time

from probe import libc, row, tool


def git(*args):
    subprocess.run(["git", *args], check=True, stdin=subprocess.DEVNULL,
                   capture_output=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})


def script(path, tripped, mode=0o755):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho {path} >> '{tripped}'\ncat\n")
    os.chmod(path, mode)


def git_traps(tripped):
    git("init", "-q", "-b", "main")
    git("config", "user.name", "Agent")
    git("config", "user.email", "agent@example.com")
    with open("README", "w") as f:
        f.write("the agent's work\n")
    git("add", "README")
    git("commit", "-qm", "the agent's commit")
    git("branch", "topic")
    evil = os.path.abspath("evil.sh")
    script(evil, tripped)
    for key, value in [
        ("core.fsmonitor", evil), ("core.pager", evil), ("pager.status", evil),
        ("core.editor", evil), ("core.sshCommand", evil), ("diff.external", evil),
        ("diff.x.command", evil), ("diff.x.textconv", evil), ("filter.x.clean", evil),
        ("filter.x.smudge", evil), ("filter.x.process", evil), ("merge.x.driver", evil),
        ("alias.st", f"!{evil}"), ("core.hooksPath", os.path.abspath("hooks")),
        ("include.path", os.path.abspath("included")),
        ("credential.helper", f"!{evil}"),
    ]:
        row(f"git config {key}", lambda k=key, v=value: git("config", k, v))
    with open("included", "w") as f:
        f.write(f"[core]\n\tfsmonitor = {evil}\n")
    with open(".gitattributes", "w") as f:
        f.write("* diff=x filter=x merge=x\n")
    for hook in ["pre-commit", "post-checkout", "post-commit", "pre-auto-gc"]:
        script(f".git/hooks/{hook}", tripped)
        script(f"hooks/{hook}", tripped)
    with open(".git/hooks/pre-push", "a") as f:
        f.write(f"\n'{evil}'\n")
    row("git config user.name", lambda: git("config", "user.name", "Agent"))


def editor_traps(tripped):
    for path in [".vscode/tasks.json", ".vscode/settings.json", ".idea/workspace.xml",
                 ".claude/settings.json", ".mcp.json", ".envrc", ".npmrc", "sub/.envrc",
                 ".devcontainer/devcontainer.json", ".cargo/config.toml"]:
        script(path, tripped)
    # A name that is itself an attack on the terminal it is shown on.
    script(".vscode/\x1b[2J\x1b]0;owned\x07name", tripped)


def perms():
    row("chmod 0777 the work directory", lambda: os.chmod(".", 0o777))
    for name, mode in [("world.sh", 0o777), ("group.txt", 0o664)]:
        with open(name, "w") as f:
            f.write("#!/bin/sh\n")
        row(f"chmod {mode:o} {name}", lambda n=name, m=mode: os.chmod(n, m))
    os.mkdir("shared-dir")
    row("chmod 1777 shared-dir", lambda: os.chmod("shared-dir", 0o1777))
    row("chmod o+w operator.txt", lambda: os.chmod("operator.txt", 0o646))


def read_only():
    def write(path, flags):
        os.close(os.open(path, flags))
    for name in ["input.csv", "inputs/data.csv"]:
        row(f"{name}, open for writing", lambda n=name: write(n, os.O_WRONLY))
        row(f"{name}, truncate", lambda n=name: os.truncate(n, 0))
        row(f"{name}, chmod 0666", lambda n=name: os.chmod(n, 0o666))
        row(f"{name}, chown to the agent", lambda n=name: os.chown(n, os.getuid(), -1))
    row("inputs, make a file", lambda: write("inputs/new", os.O_CREAT | os.O_WRONLY))
    row("inputs, chmod 0777", lambda: os.chmod("inputs", 0o777))


def fill(where, mib):
    written = 0
    chunk = b"x" * (1 << 20)
    try:
        with open(os.path.join(where, "fill"), "wb") as f:
            for _ in range(mib):
                f.write(chunk)
                f.flush()
                written += 1
        return f"all {written} MiB"
    except OSError as e:
        return f"{errno.errorcode[e.errno]} after {written} MiB"


def tmpfs():
    for where in ["/tmp", os.environ["HOME"], "/dev/shm"]:
        row(f"fill {where} with 80 MiB", lambda w=where: fill(w, 80))
        os.unlink(os.path.join(where, "fill"))
    row("write /dev/planted", lambda: open("/dev/planted", "w").close())


def inotify_hog():
    """Every inotify instance this user may have, held: how many, and why
    no more."""
    fds = []
    try:
        while True:
            fds.append(ctypes_inotify())
    except OSError as e:
        return fds, errno.errorcode[e.errno]


def ctypes_inotify():
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def main():
    mode = sys.argv[1]
    if mode == "git":
        git_traps(sys.argv[2])
        editor_traps(sys.argv[2])
    elif mode == "perms":
        perms()
    elif mode == "read-only":
        read_only()
    elif mode == "tmpfs":
        tmpfs()
    elif mode == "inotify-hog":
        fds, result = inotify_hog()
        print(f"inotify instances held: {len(fds)} ({result})", flush=True)
        open("hogging", "w").close()
        while not os.path.exists("release"):
            time.sleep(0.05)
    elif mode == "inotify-one":
        row("inotify_init1", lambda: os.close(ctypes_inotify()))


if __name__ == "__main__":
    main()
