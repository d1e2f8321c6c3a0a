//! `KeyStore` on a real filesystem: modes, no overwrite, find by DID, refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use constle_identity::{
    DidKey, KeyError, KeyKind, KeyStore, KeyStoreError, Name, NameError, SigningIdentity,
};

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

/// A fresh `$CONSTLE_HOME` that does not exist yet, and its temp parent.
fn fresh_home() -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().unwrap();
    let home = parent.path().join("constle-home");
    (parent, home)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn open_creates_private_directories() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    assert_eq!(store.dir(), home.join("keys"));
    for dir in [
        home.clone(),
        home.join("keys"),
        home.join("keys/agent"),
        home.join("keys/approver"),
    ] {
        assert!(dir.is_dir(), "{}", dir.display());
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
    // Opening again is fine.
    KeyStore::open(&home).unwrap();
}

#[test]
fn open_creates_missing_parents() {
    let (_parent, home) = fresh_home();
    let deep = home.join("a/b");
    KeyStore::open(&deep).unwrap();
    assert_eq!(mode(&deep.join("keys/agent")), 0o700);
}

#[test]
fn open_refuses_directories_others_can_reach() {
    for (sub, bad_mode) in [
        ("", 0o755),
        ("", 0o710),
        ("keys", 0o750),
        ("keys/agent", 0o701),
        ("keys/approver", 0o777),
    ] {
        let (_parent, home) = fresh_home();
        KeyStore::open(&home).unwrap();
        let dir = if sub.is_empty() {
            home.clone()
        } else {
            home.join(sub)
        };
        chmod(&dir, bad_mode);
        match KeyStore::open(&home) {
            Err(KeyStoreError::InsecureDirectory { path, mode }) => {
                assert_eq!(path, dir);
                assert_eq!(mode, bad_mode);
            }
            other => panic!("{sub:?} {bad_mode:o}: {other:?}"),
        }
        let msg = KeyStore::open(&home).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("chmod 700 {}", dir.display())),
            "{msg}"
        );
        // Not silently fixed.
        assert_eq!(mode(&dir), bad_mode);
    }
}

#[test]
fn open_refuses_a_file_where_a_directory_belongs() {
    let (_parent, home) = fresh_home();
    fs::create_dir(&home).unwrap();
    chmod(&home, 0o700);
    fs::write(home.join("keys"), b"").unwrap();
    assert!(matches!(
        KeyStore::open(&home),
        Err(KeyStoreError::NotADirectory { path }) if path == home.join("keys")
    ));
}

#[test]
fn generate_writes_a_private_v1_key_and_load_reads_it() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let (did, path) = store
        .generate(KeyKind::Agent, &name("research-bot"))
        .unwrap();
    assert_eq!(path, home.join("keys/agent/research-bot.pem"));
    assert_eq!(store.key_path(KeyKind::Agent, &name("research-bot")), path);
    assert_eq!(mode(&path), 0o600);
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_file());
    let pem = fs::read_to_string(&path).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    assert_eq!(SigningIdentity::from_pkcs8_pem(&pem).unwrap().did(), &did);

    let loaded = store.load(KeyKind::Agent, &name("research-bot")).unwrap();
    assert_eq!(loaded.did(), &did);
    let signature = loaded.sign(b"hello");
    did.verify(b"hello", &signature).unwrap();

    // Only the key itself is left: no temporary files.
    assert_eq!(entries(&home.join("keys/agent")), vec!["research-bot.pem"]);
    assert!(entries(&home.join("keys/approver")).is_empty());
}

#[test]
fn approver_keys_go_to_their_own_directory() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let (did, path) = store.generate(KeyKind::Approver, &name("alice")).unwrap();
    assert_eq!(path, home.join("keys/approver/alice.pem"));
    assert_eq!(
        store.load(KeyKind::Approver, &name("alice")).unwrap().did(),
        &did
    );
    assert!(matches!(
        store.load(KeyKind::Agent, &name("alice")),
        Err(KeyStoreError::MissingKeyFile { .. })
    ));
}

#[test]
fn generate_never_overwrites() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let (did, path) = store.generate(KeyKind::Agent, &name("bot")).unwrap();
    let before = fs::read(&path).unwrap();
    match store.generate(KeyKind::Agent, &name("bot")) {
        Err(KeyStoreError::Exists { path: existing }) => assert_eq!(existing, path),
        other => panic!("{other:?}"),
    }
    let msg = store
        .generate(KeyKind::Agent, &name("bot"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("never overwrites"), "{msg}");
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(
        store.load(KeyKind::Agent, &name("bot")).unwrap().did(),
        &did
    );
    assert_eq!(entries(&home.join("keys/agent")), vec!["bot.pem"]);
}

#[test]
fn generate_refuses_even_a_dangling_symlink() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let link = home.join("keys/agent/bot.pem");
    std::os::unix::fs::symlink(home.join("nowhere"), &link).unwrap();
    assert!(matches!(
        store.generate(KeyKind::Agent, &name("bot")),
        Err(KeyStoreError::Exists { .. })
    ));
    assert!(!home.join("nowhere").exists());
}

#[test]
fn find_by_did() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let mut dids = Vec::new();
    for n in ["a1", "b2", "c3"] {
        dids.push(store.generate(KeyKind::Agent, &name(n)).unwrap().0);
    }
    let (approver, _) = store.generate(KeyKind::Approver, &name("a1")).unwrap();
    // A leftover temporary file from a crash is ignored.
    fs::write(home.join("keys/agent/.zz.pem.1-0.tmp"), b"garbage").unwrap();
    chmod(&home.join("keys/agent/.zz.pem.1-0.tmp"), 0o600);
    for did in &dids {
        assert_eq!(store.find(KeyKind::Agent, did).unwrap().did(), did);
    }
    assert_eq!(
        store.find(KeyKind::Approver, &approver).unwrap().did(),
        &approver
    );
    // Kinds are kept apart.
    assert!(matches!(
        store.find(KeyKind::Approver, &dids[0]),
        Err(KeyStoreError::NotFound { .. })
    ));
}

#[test]
fn not_found_names_did_directory_and_command() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    store.generate(KeyKind::Agent, &name("someone")).unwrap();
    let stranger = SigningIdentity::from_bytes(&[8u8; 32]);
    let did: &DidKey = stranger.did();
    match store.find(KeyKind::Agent, did) {
        Err(KeyStoreError::NotFound { did: d, dir, .. }) => {
            assert_eq!(&*d, did);
            assert_eq!(dir, home.join("keys/agent"));
        }
        other => panic!("{:?}", other.map(|i| i.did().clone())),
    }
    let msg = store.find(KeyKind::Agent, did).err().unwrap().to_string();
    assert!(msg.contains(did.as_str()), "{msg}");
    assert!(
        msg.contains(&home.join("keys/agent").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("constle keygen NAME"), "{msg}");
    let msg = store
        .find(KeyKind::Approver, did)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("constle webhook-keygen NAME"), "{msg}");
}

#[test]
fn key_files_others_can_read_are_refused() {
    for bad_mode in [0o640, 0o604, 0o660, 0o644] {
        let (_parent, home) = fresh_home();
        let store = KeyStore::open(&home).unwrap();
        let (did, path) = store.generate(KeyKind::Agent, &name("leaky")).unwrap();
        chmod(&path, bad_mode);
        match store.load(KeyKind::Agent, &name("leaky")) {
            Err(KeyStoreError::InsecureKeyFile { path: p, mode }) => {
                assert_eq!(p, path);
                assert_eq!(mode, bad_mode);
            }
            other => panic!("{bad_mode:o}: {:?}", other.map(|i| i.did().clone())),
        }
        let msg = store
            .load(KeyKind::Agent, &name("leaky"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            msg.contains(&format!("chmod 600 {}", path.display())),
            "{msg}"
        );
        assert!(matches!(
            store.find(KeyKind::Agent, &did),
            Err(KeyStoreError::InsecureKeyFile { .. })
        ));
        // Not silently fixed.
        assert_eq!(mode(&path), bad_mode);
    }
}

#[test]
fn missing_key_file_says_how_to_create_it() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let err = store.load(KeyKind::Agent, &name("ghost")).err().unwrap();
    assert!(matches!(err, KeyStoreError::MissingKeyFile { .. }));
    let msg = err.to_string();
    assert!(msg.contains("constle keygen ghost"), "{msg}");
    assert!(msg.contains("keys/agent/ghost.pem"), "{msg}");
    let msg = store
        .load(KeyKind::Approver, &name("ghost"))
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("constle webhook-keygen ghost"), "{msg}");
}

#[test]
fn unusable_key_files_are_named() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let path = home.join("keys/agent/broken.pem");
    fs::write(&path, b"not a key").unwrap();
    chmod(&path, 0o600);
    match store.load(KeyKind::Agent, &name("broken")) {
        Err(KeyStoreError::BadKeyFile { path: p, source }) => {
            assert_eq!(p, path);
            assert!(matches!(source, KeyError::NotPem { .. }));
        }
        other => panic!("{:?}", other.map(|i| i.did().clone())),
    }
    // find does not skip it silently either.
    let did = SigningIdentity::from_bytes(&[1u8; 32]).did().clone();
    assert!(matches!(
        store.find(KeyKind::Agent, &did),
        Err(KeyStoreError::BadKeyFile { .. })
    ));
    // Non-UTF-8 content.
    fs::write(&path, [0xffu8, 0xfe, 0x00]).unwrap();
    assert!(matches!(
        store.load(KeyKind::Agent, &name("broken")),
        Err(KeyStoreError::BadKeyFile { .. })
    ));
    // Far too large.
    fs::write(&path, vec![b'A'; 100_000]).unwrap();
    assert!(matches!(
        store.load(KeyKind::Agent, &name("broken")),
        Err(KeyStoreError::TooLarge { .. })
    ));
}

#[test]
fn symlinked_key_files_are_refused() {
    let (_parent, home) = fresh_home();
    let store = KeyStore::open(&home).unwrap();
    let (_, real) = store.generate(KeyKind::Agent, &name("real")).unwrap();
    let link = home.join("keys/agent/link.pem");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert!(matches!(
        store.load(KeyKind::Agent, &name("link")),
        Err(KeyStoreError::NotAFile { path }) if path == link
    ));
}

#[test]
fn names_that_are_not_safe_file_names_are_refused() {
    let too_long = "a".repeat(65);
    type Check = fn(&NameError) -> bool;
    let cases: [(&str, Check); 10] = [
        ("a/b", |e| {
            matches!(e, NameError::InvalidCharacter { character: '/', .. })
        }),
        ("../keys", |e| {
            matches!(e, NameError::InvalidCharacter { character: '/', .. })
        }),
        ("..", |e| {
            matches!(e, NameError::BadStart { first: '.', .. })
        }),
        ("a..b", |e| matches!(e, NameError::DotDot { .. })),
        ("tab\there", |e| {
            matches!(
                e,
                NameError::InvalidCharacter {
                    character: '\t',
                    ..
                }
            )
        }),
        ("", |e| matches!(e, NameError::Empty)),
        (&too_long, |e| {
            matches!(e, NameError::TooLong { len: 65, .. })
        }),
        (".hidden", |e| {
            matches!(e, NameError::BadStart { first: '.', .. })
        }),
        ("agént", |e| {
            matches!(
                e,
                NameError::InvalidCharacter {
                    character: 'é', ..
                }
            )
        }),
        ("пример", |e| {
            matches!(e, NameError::InvalidCharacter { .. })
        }),
    ];
    for (input, expected) in cases {
        let err = Name::new(input).unwrap_err();
        assert!(expected(&err), "{input:?}: {err:?}");
        let msg = err.to_string();
        assert!(msg.contains("research-bot"), "{msg}");
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
    }
    assert_eq!(Name::new(&"a".repeat(64)).unwrap().as_str().len(), 64);
}

#[test]
fn kind_names() {
    assert_eq!(KeyKind::Agent.to_string(), "agent");
    assert_eq!(KeyKind::Approver.dir_name(), "approver");
    assert_eq!(KeyKind::Approver.keygen_command(), "constle webhook-keygen");
    assert_eq!(KeyKind::Witness.dir_name(), "witness");
    assert_eq!(KeyKind::Witness.keygen_command(), "constle witness-keygen");
}
