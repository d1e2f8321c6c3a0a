//! The review, against the host's real git.

use super::*;

fn git() -> PathBuf {
    find_git().expect("these tests need git (/usr/bin/git)")
}

fn keys(review: &Review) -> Vec<&str> {
    match review {
        Review::Rewrite { removed, .. } => removed.iter().map(String::as_str).collect(),
        other => panic!("not a rewrite: {other:?}"),
    }
}

const INIT: &[u8] = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";

#[test]
fn what_git_init_and_a_normal_session_write_is_kept() {
    let after = [
        INIT,
        b"[user]\n\tname = Agent Smith\n\temail = a@example.com\n[remote \"origin\"]\n\turl = https://example.com/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"feature/x.y\"]\n\tremote = origin\n\tmerge = refs/heads/feature/x.y\n",
    ]
    .concat();
    assert_eq!(review(Some(&git()), None, &after), Review::Keep);
    assert_eq!(review(Some(&git()), Some(INIT), &after), Review::Keep);
}

#[test]
fn programs_the_agent_named_are_removed_and_the_rest_kept() {
    let after = [
        INIT,
        b"[core]\n\tfsmonitor = ./evil.sh\n\tpager = ./evil.sh\n\thooksPath = h\n\tsshCommand = evil\n[diff]\n\texternal = evil\n[filter \"x\"]\n\tclean = evil\n[alias]\n\tst = !evil\n[include]\n\tpath = other\n[includeIf \"gitdir:/\"]\n\tpath = other\n[user]\n\tname = ok\n[remote \"o\"]\n\turl = ext::sh -c evil\n\tuploadpack = evil\n",
    ]
    .concat();
    let review = review(Some(&git()), Some(INIT), &after);
    assert_eq!(
        keys(&review),
        [
            "core.fsmonitor",
            "core.pager",
            "core.hookspath",
            "core.sshcommand",
            "diff.external",
            "filter.x.clean",
            "alias.st",
            "include.path",
            "includeif.gitdir:/.path",
            "remote.o.url",
            "remote.o.uploadpack",
        ]
    );
    let Review::Rewrite { bytes, .. } = review else {
        unreachable!()
    };
    let left = list(&git(), &bytes).unwrap();
    let left: Vec<&str> = left.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(
        left,
        [
            "core.repositoryformatversion",
            "core.filemode",
            "core.bare",
            "core.logallrefupdates",
            "user.name"
        ]
    );
}

#[test]
fn the_operators_own_settings_stay_whatever_they_are() {
    let before = b"[core]\n\thooksPath = .husky/_\n[diff \"lfs\"]\n\ttextconv = cat\n";
    let after =
        b"[core]\n\thooksPath = .husky/_\n\tfsmonitor = x\n[diff \"lfs\"]\n\ttextconv = cat\n";
    let review = review(Some(&git()), Some(before), after);
    assert_eq!(keys(&review), ["core.fsmonitor"]);
    // The same setting twice: the second was added.
    let twice = b"[core]\n\thooksPath = .husky/_\n\thooksPath = .husky/_\n[diff \"lfs\"]\n\ttextconv = cat\n";
    assert_eq!(keys(&review_of(before, twice)), ["core.hookspath"]);
}

fn review_of(before: &[u8], after: &[u8]) -> Review {
    review(Some(&git()), Some(before), after)
}

#[test]
fn spellings_git_reads_as_a_program_are_caught() {
    // Each is core.fsmonitor (or a pager) to git, written in a way a
    // parser of its own could misread.
    for trick in [
        &b"[core] fsmonitor = evil\n"[..],
        b"[CORE]\n\tFsMonitor = evil\n",
        b"[core]\n\tfsmonitor = \"ev\\\nil\"\n",
        b"[core]\n\tfsmonitor = evil ; comment\n",
        b"[core.x]\n\tfsmonitor = evil\n[core]\n\tfsmonitor\n",
        b"\xef\xbb\xbf[core]\n\tfsmonitor = evil\n",
        b"[core]\r\n\tfsmonitor = evil\r\n",
        b"[pager]\n\tstatus = evil\n",
        b"[core]\n\tpager = \"evil \\\"x\\\"\" # c\n",
    ] {
        let review = review(Some(&git()), None, trick);
        let Review::Rewrite { bytes, removed } = &review else {
            panic!("{:?}: {review:?}", String::from_utf8_lossy(trick));
        };
        assert!(!removed.is_empty());
        let left = list(&git(), bytes).unwrap();
        assert!(left.iter().all(allowed), "{left:?}");
    }
}

#[test]
fn values_and_subsections_survive_the_rewrite_byte_for_byte() {
    let odd = b"[core]\n\tfsmonitor = x\n[branch \"a\\\"b\\\\c.d e\"]\n\tdescription = \"  lead, \\\"q\\\", back\\\\slash, tab\\t, nl\\n, # ; end  \"\n\tremote\n[user]\n\tname = \"\"\n";
    let Review::Rewrite { bytes, .. } = review(Some(&git()), None, odd) else {
        panic!("no rewrite");
    };
    let want: Vec<Setting> = list(&git(), odd)
        .unwrap()
        .into_iter()
        .filter(|s| s.key != "core.fsmonitor")
        .collect();
    assert_eq!(list(&git(), &bytes).unwrap(), want);
    assert_eq!(want.len(), 3);
}

#[test]
fn a_file_git_cannot_read_or_no_git_is_set_aside() {
    assert!(matches!(
        review(Some(&git()), None, b"[core\n\tfsmonitor = x\n"),
        Review::Unreadable(_)
    ));
    assert!(matches!(review(None, None, INIT), Review::Unreadable(_)));
}

#[test]
fn urls_that_name_a_program() {
    for bad in [
        "ext::sh -c evil",
        "EXT::x",
        "fd::3",
        "foo::https://x",
        "-oProxyCommand=x",
    ] {
        assert!(!safe_url(bad.as_bytes()), "{bad}");
    }
    for good in [
        "https://example.com/r.git",
        "git@example.com:r.git",
        "ssh://git@example.com/r",
        "/srv/r.git",
        "../r",
        "file:///srv/r::x",
    ] {
        assert!(safe_url(good.as_bytes()), "{good}");
    }
}

#[test]
fn keys_split_at_the_first_and_last_dot() {
    assert_eq!(split_key("core.bare"), ("core", None, "bare"));
    assert_eq!(
        split_key("branch.feature/x.y.remote"),
        ("branch", Some("feature/x.y"), "remote")
    );
}
