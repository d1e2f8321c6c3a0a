//! The durable state: gate requests, their decisions, the approvers'
//! password hashes and the login sessions, in one SQLite file.
//!
//! One connection behind a mutex is the only writer, so no two decisions
//! race inside this process; the database enforces the rest itself, so
//! neither a bug here nor a second process can decide a request twice: the
//! decision is written with `UPDATE … WHERE decision IS NULL AND
//! expires_at_unix > now`, and a trigger refuses any update of a row that
//! already has a decision. WAL with `synchronous = FULL`: a decision that was
//! acknowledged survives a crash or a power cut.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension as _, params};

pub use crate::error::StoreError;
use crate::private;
use crate::request::GateRequest;

/// The decision a person made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Forward the call.
    Approved,
    /// Refuse the call.
    Denied,
}

impl Decision {
    /// The word on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Denied => "denied",
        }
    }
}

/// One request as stored, with its decision if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRequest {
    /// The request as the gate sent it.
    pub request: GateRequest,
    /// When the POST arrived, in seconds since the epoch.
    pub received_at: i64,
    /// `approved` or `denied`, once decided.
    pub decision: Option<String>,
    /// Who decided (the approver's user name).
    pub decided_by: Option<String>,
    /// When, in seconds since the epoch.
    pub decided_at: Option<i64>,
    /// Standard base64 of the Ed25519 signature, once decided.
    pub signature: Option<String>,
}

/// What [`Store::insert_request`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// A new request.
    New,
    /// The same request again (the gate retries its POST): nothing changed.
    Same,
    /// Another request under an id already taken: refused, nothing changed.
    Conflict,
}

/// What [`Store::decide`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decided {
    /// The decision is recorded and signed.
    Recorded,
    /// No such request.
    NotFound,
    /// It already has a decision; that one stands.
    AlreadyDecided,
    /// Its `expires_at` has passed; the gate no longer waits.
    Expired,
}

/// A login session, found by the hash of its id.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who logged in.
    pub user: String,
    /// The session's CSRF token, which every form must repeat.
    pub csrf: String,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS requests (
    request_id      TEXT PRIMARY KEY,
    agent           TEXT NOT NULL,
    server          TEXT NOT NULL,
    tool            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    subject_digest  TEXT NOT NULL,
    expires_at      TEXT NOT NULL,
    expires_at_unix INTEGER NOT NULL,
    received_at     INTEGER NOT NULL,
    decision        TEXT CHECK (decision IN ('approved', 'denied')),
    decided_by      TEXT,
    decided_at      INTEGER,
    signature       TEXT,
    CHECK ((decision IS NULL) = (signature IS NULL)),
    CHECK ((decision IS NULL) = (decided_by IS NULL))
) STRICT;
CREATE TRIGGER IF NOT EXISTS decisions_are_final
    BEFORE UPDATE ON requests WHEN OLD.decision IS NOT NULL
    BEGIN SELECT RAISE(ABORT, 'a decided request cannot be changed'); END;
CREATE TRIGGER IF NOT EXISTS requests_are_kept
    BEFORE DELETE ON requests
    BEGIN SELECT RAISE(ABORT, 'requests are never deleted'); END;
CREATE TABLE IF NOT EXISTS users (
    name         TEXT PRIMARY KEY,
    password_phc TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS sessions (
    id_hash    TEXT PRIMARY KEY,
    user       TEXT NOT NULL,
    csrf       TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
";

const COLUMNS: &str = "request_id, agent, server, tool, arguments, subject_digest, expires_at, \
     expires_at_unix, received_at, decision, decided_by, decided_at, signature";

/// The database.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if need be, mode `0600`) the database at `path`.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotPrivate`] or [`StoreError::NotOwned`] if it, or its
    /// `-wal` or `-shm` file, can be read or written by another user;
    /// [`StoreError`] too if SQLite cannot open or set it up.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        private::create(path)?;
        private::check(path)?;
        let store = Store::setup(Connection::open(path)?)?;
        // WAL mode has made the `-wal` and `-shm` files by now.
        private::check(path)?;
        Ok(store)
    }

    /// A database in memory, for tests.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite cannot set it up.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Store::setup(Connection::open_in_memory()?)
    }

    fn setup(conn: Connection) -> Result<Store, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written
        // (every change is one statement or transaction), so carry on.
        match self.conn.lock() {
            Ok(conn) => conn,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Records a request from the gate. The same request again changes
    /// nothing; another one under a known id is refused.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn insert_request(&self, r: &GateRequest, now: i64) -> Result<Inserted, StoreError> {
        let conn = self.conn();
        let added = conn.execute(
            "INSERT INTO requests (request_id, agent, server, tool, arguments, subject_digest,
                 expires_at, expires_at_unix, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (request_id) DO NOTHING",
            params![
                r.request_id,
                r.agent,
                r.server,
                r.tool,
                r.arguments,
                r.subject_digest,
                r.expires_at,
                r.expires_at_unix,
                now
            ],
        )?;
        if added == 1 {
            return Ok(Inserted::New);
        }
        let same = find(&conn, &r.request_id)?.is_some_and(|stored| stored.request == *r);
        Ok(if same {
            Inserted::Same
        } else {
            Inserted::Conflict
        })
    }

    /// Decides request `id`, if it is undecided and unexpired at `now`.
    /// `sign` is given the stored request id and subject digest, exactly as
    /// the gate sent them, and returns the signature to publish.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn decide(
        &self,
        id: &str,
        decision: Decision,
        by: &str,
        now: i64,
        sign: impl FnOnce(&str, &str) -> String,
    ) -> Result<Decided, StoreError> {
        let conn = self.conn();
        let Some(request) = find(&conn, id)? else {
            return Ok(Decided::NotFound);
        };
        if request.decision.is_some() {
            return Ok(Decided::AlreadyDecided);
        }
        if request.request.expires_at_unix <= now {
            return Ok(Decided::Expired);
        }
        let signature = sign(&request.request.request_id, &request.request.subject_digest);
        // The checks above are for the message; this WHERE is the guarantee.
        let changed = conn.execute(
            "UPDATE requests SET decision = ?2, decided_by = ?3, decided_at = ?4, signature = ?5
             WHERE request_id = ?1 AND decision IS NULL AND expires_at_unix > ?4",
            params![id, decision.as_str(), by, now, signature],
        )?;
        Ok(if changed == 1 {
            Decided::Recorded
        } else {
            Decided::AlreadyDecided
        })
    }

    /// The request with id `id`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn request(&self, id: &str) -> Result<Option<StoredRequest>, StoreError> {
        find(&self.conn(), id)
    }

    /// Undecided requests whose deadline has not passed, soonest first.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn pending(&self, now: i64) -> Result<Vec<StoredRequest>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM requests WHERE decision IS NULL AND expires_at_unix > ?1
             ORDER BY expires_at_unix, request_id"
        ))?;
        let rows = stmt.query_map([now], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The latest `limit` decided or expired requests, newest first.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn history(&self, now: i64, limit: u32) -> Result<Vec<StoredRequest>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM requests WHERE decision IS NOT NULL OR expires_at_unix <= ?1
             ORDER BY coalesce(decided_at, expires_at_unix) DESC, request_id LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![now, limit], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets (or replaces) `user`'s password hash, a PHC string.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn set_password(&self, user: &str, phc: &str) -> Result<(), StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO users (name, password_phc) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET password_phc = excluded.password_phc",
            params![user, phc],
        )?;
        // A new password ends that user's sessions.
        conn.execute("DELETE FROM sessions WHERE user = ?1", [user])?;
        Ok(())
    }

    /// `user`'s password hash.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn password_hash(&self, user: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT password_phc FROM users WHERE name = ?1",
                [user],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Whether any approver has a password.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn has_users(&self) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT EXISTS (SELECT 1 FROM users)", [], |r| r.get(0))?)
    }

    /// Records a session; expired ones are swept at the same time.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn create_session(
        &self,
        id_hash: &str,
        user: &str,
        csrf: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        conn.execute("DELETE FROM sessions WHERE expires_at <= ?1", [now])?;
        conn.execute(
            "INSERT INTO sessions (id_hash, user, csrf, expires_at) VALUES (?1, ?2, ?3, ?4)",
            params![id_hash, user, csrf, expires_at],
        )?;
        Ok(())
    }

    /// The unexpired session whose id hashes to `id_hash`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn session(&self, id_hash: &str, now: i64) -> Result<Option<Session>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT user, csrf FROM sessions WHERE id_hash = ?1 AND expires_at > ?2",
                params![id_hash, now],
                |r| {
                    Ok(Session {
                        user: r.get(0)?,
                        csrf: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    /// Ends a session.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn delete_session(&self, id_hash: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM sessions WHERE id_hash = ?1", [id_hash])?;
        Ok(())
    }
}

fn find(conn: &Connection, id: &str) -> Result<Option<StoredRequest>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM requests WHERE request_id = ?1"),
            [id],
            row,
        )
        .optional()?)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRequest> {
    Ok(StoredRequest {
        request: GateRequest {
            request_id: r.get(0)?,
            agent: r.get(1)?,
            server: r.get(2)?,
            tool: r.get(3)?,
            arguments: r.get(4)?,
            subject_digest: r.get(5)?,
            expires_at: r.get(6)?,
            expires_at_unix: r.get(7)?,
        },
        received_at: r.get(8)?,
        decision: r.get(9)?,
        decided_by: r.get(10)?,
        decided_at: r.get(11)?,
        signature: r.get(12)?,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;
    use crate::private::files;

    /// A database that has been written to, so all three files exist.
    fn written(db: &Path) {
        let store = Store::open(db).unwrap();
        store.insert_request(&request("r1", 100), 0).unwrap();
        for file in files(db) {
            assert!(file.exists(), "{}", file.display());
        }
        // Kept open: SQLite removes the WAL and SHM files on its last close.
        std::mem::forget(store);
    }

    #[test]
    fn the_database_and_its_wal_and_shm_files_are_created_0600() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("approver.sqlite");
        written(&db);
        for file in files(&db) {
            let mode = std::fs::metadata(&file).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "{} is {mode:o}", file.display());
        }
    }

    #[test]
    fn a_database_others_can_read_or_write_is_refused() {
        for (which, mode) in [(0, 0o644), (0, 0o640), (0, 0o602), (1, 0o604), (2, 0o660)] {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("approver.sqlite");
            written(&db);
            let file = &files(&db)[which];
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = Store::open(&db)
                .err()
                .unwrap_or_else(|| panic!("{mode:o} opened"));
            let message = err.to_string();
            let shown = file.display().to_string();
            for says in [
                shown.as_str(),
                &format!("{mode:04o}"),
                &format!("chmod 600 {shown}"),
            ] {
                assert!(message.contains(says), "{says:?} not in: {message}");
            }
        }
    }

    #[test]
    fn a_database_another_user_owns_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: only root can give a file to another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("approver.sqlite");
        written(&db);
        std::os::unix::fs::chown(&db, Some(65534), None).unwrap();
        let message = Store::open(&db)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.contains("belongs to uid 65534"), "{message}");
        assert!(message.contains(&db.display().to_string()), "{message}");
    }

    fn request(id: &str, expires: i64) -> GateRequest {
        GateRequest {
            request_id: id.to_owned(),
            agent: "a".to_owned(),
            server: "s".to_owned(),
            tool: "t".to_owned(),
            arguments: "{}".to_owned(),
            subject_digest: format!("sha256:{}", "ab".repeat(32)),
            expires_at: "2026-01-01T00:00:00Z".to_owned(),
            expires_at_unix: expires,
        }
    }

    #[test]
    fn a_decision_is_final_and_expiry_is_enforced() -> Result<(), StoreError> {
        let store = Store::open_in_memory()?;
        assert_eq!(store.insert_request(&request("r1", 100), 0)?, Inserted::New);
        assert_eq!(
            store.insert_request(&request("r1", 100), 1)?,
            Inserted::Same
        );
        let other = GateRequest {
            agent: "b".to_owned(),
            ..request("r1", 100)
        };
        assert_eq!(store.insert_request(&other, 1)?, Inserted::Conflict);
        let sign = |id: &str, digest: &str| format!("sig:{id}:{digest}");
        assert_eq!(
            store.decide("r1", Decision::Approved, "ann", 10, sign)?,
            Decided::Recorded
        );
        assert_eq!(
            store.decide("r1", Decision::Denied, "bob", 11, sign)?,
            Decided::AlreadyDecided
        );
        let stored = store.request("r1")?;
        assert_eq!(
            stored.as_ref().and_then(|r| r.decision.as_deref()),
            Some("approved")
        );
        assert_eq!(
            stored.as_ref().and_then(|r| r.decided_by.as_deref()),
            Some("ann")
        );
        store.insert_request(&request("r2", 100), 0)?;
        assert_eq!(
            store.decide("r2", Decision::Approved, "ann", 100, sign)?,
            Decided::Expired
        );
        assert_eq!(
            store.decide("nope", Decision::Approved, "ann", 1, sign)?,
            Decided::NotFound
        );
        Ok(())
    }

    #[test]
    fn the_database_itself_refuses_a_second_decision() -> Result<(), StoreError> {
        let store = Store::open_in_memory()?;
        store.insert_request(&request("r1", 100), 0)?;
        store.decide("r1", Decision::Denied, "ann", 10, |_, _| "s".to_owned())?;
        let conn = store.conn();
        // Even a write that forgets `WHERE decision IS NULL` is refused.
        let err = conn.execute(
            "UPDATE requests SET decision = 'approved' WHERE request_id = 'r1'",
            [],
        );
        assert!(err.is_err());
        let guarded = conn.execute(
            "UPDATE requests SET decision = 'approved', signature = 'x', decided_by = 'x'
             WHERE request_id = 'r1' AND decision IS NULL",
            [],
        )?;
        assert_eq!(guarded, 0);
        Ok(())
    }
}
