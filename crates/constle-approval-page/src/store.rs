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
//!
//! The schema is versioned with SQLite's `user_version`. Version 0 is the
//! first approver's (version 1 requests only); [`Store::open`] migrates it
//! in one transaction, adding columns and a table and changing no row, and
//! refuses a database written by a newer approver.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};

pub use crate::error::StoreError;
use crate::private;
use crate::request::{GateRequest, ListedApprover, ReportedVote, Version2};

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
    /// The `did:key` that signed (`None` for decisions made before the
    /// schema recorded it).
    pub signed_by: Option<String>,
    /// The gate's latest "votes so far" report (version 2 only): unsigned,
    /// shown, never trusted.
    pub reported: Option<Reported>,
}

/// A "votes so far" report as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    /// The votes the gate says it counted.
    pub votes: Vec<ReportedVote>,
    /// When the report arrived, in seconds since the epoch.
    pub at: i64,
}

/// What [`Store::report_votes`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportOutcome {
    /// Kept (unless an earlier report listed more votes: the gate's count
    /// only grows, so that one is the newer).
    Kept,
    /// No such request.
    NotFound,
    /// A version 1 request, which has no votes.
    NotVersion2,
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

/// The schema this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// From 0 (the first approver's) to 1: version 2 requests, the key that
/// signed each decision, and the gate's reports of votes so far. Adds
/// columns (existing rows read as version 1) and a table; changes no row.
const MIGRATION_1: &str = "
ALTER TABLE requests ADD COLUMN version INTEGER NOT NULL DEFAULT 1 CHECK (version IN (1, 2));
ALTER TABLE requests ADD COLUMN agent_did TEXT;
ALTER TABLE requests ADD COLUMN salt TEXT;
ALTER TABLE requests ADD COLUMN policy_digest TEXT;
ALTER TABLE requests ADD COLUMN threshold INTEGER;
ALTER TABLE requests ADD COLUMN approvers TEXT;
ALTER TABLE requests ADD COLUMN signed_by TEXT;
CREATE TRIGGER version_2_requests_are_whole
    BEFORE INSERT ON requests
    WHEN NEW.version = 2 AND (NEW.salt IS NULL OR NEW.policy_digest IS NULL
        OR NEW.threshold IS NULL OR NEW.approvers IS NULL)
    BEGIN SELECT RAISE(ABORT, 'a version 2 request lacks a member'); END;
CREATE TRIGGER version_2_decisions_name_their_key
    BEFORE UPDATE OF decision ON requests
    WHEN NEW.version = 2 AND NEW.decision IS NOT NULL AND NEW.signed_by IS NULL
    BEGIN SELECT RAISE(ABORT, 'a version 2 decision must name the key that signed'); END;
CREATE TABLE reported_votes (
    request_id  TEXT PRIMARY KEY REFERENCES requests (request_id),
    votes       TEXT NOT NULL,
    count       INTEGER NOT NULL,
    reported_at INTEGER NOT NULL
) STRICT;
";

const COLUMNS: &str = "request_id, agent, server, tool, arguments, subject_digest, expires_at, \
     expires_at_unix, received_at, decision, decided_by, decided_at, signature, version, \
     agent_did, salt, policy_digest, threshold, approvers, signed_by, votes, reported_at";

/// Requests with their reported votes, if any.
const FROM: &str = "requests LEFT JOIN reported_votes USING (request_id)";

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

    fn setup(mut conn: Connection) -> Result<Store, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&mut conn)?;
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
                 expires_at, expires_at_unix, received_at, version, agent_did, salt,
                 policy_digest, threshold, approvers)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
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
                now,
                if r.v2.is_some() { 2 } else { 1 },
                r.v2.as_ref().and_then(|v2| v2.agent_did.as_deref()),
                r.v2.as_ref().map(|v2| v2.salt.as_str()),
                r.v2.as_ref().map(|v2| v2.policy_digest.as_str()),
                r.v2.as_ref().map(|v2| v2.threshold as i64),
                r.v2.as_ref().map(|v2| json_text(&v2.approvers)),
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
    /// `sign` is given the stored request, exactly as the gate sent it, and
    /// returns the signature to publish, made with the key `signed_by`.
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
        signed_by: &str,
        sign: impl FnOnce(&GateRequest) -> String,
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
        let signature = sign(&request.request);
        // The checks above are for the message; this WHERE is the guarantee.
        let changed = conn.execute(
            "UPDATE requests SET decision = ?2, decided_by = ?3, decided_at = ?4, signature = ?5,
                 signed_by = ?6
             WHERE request_id = ?1 AND decision IS NULL AND expires_at_unix > ?4",
            params![id, decision.as_str(), by, now, signature, signed_by],
        )?;
        Ok(if changed == 1 {
            Decided::Recorded
        } else {
            Decided::AlreadyDecided
        })
    }

    /// Keeps the gate's "votes so far" report for version 2 request `id`,
    /// unless an earlier one listed more votes.
    ///
    /// # Errors
    ///
    /// [`StoreError`] if SQLite fails.
    pub fn report_votes(
        &self,
        id: &str,
        votes: &[ReportedVote],
        now: i64,
    ) -> Result<ReportOutcome, StoreError> {
        let conn = self.conn();
        match find(&conn, id)? {
            None => return Ok(ReportOutcome::NotFound),
            Some(stored) if stored.request.v2.is_none() => return Ok(ReportOutcome::NotVersion2),
            Some(_) => {}
        }
        conn.execute(
            "INSERT INTO reported_votes (request_id, votes, count, reported_at)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (request_id) DO UPDATE SET votes = excluded.votes,
                 count = excluded.count, reported_at = excluded.reported_at
             WHERE excluded.count >= reported_votes.count",
            params![id, json_text(&votes), votes.len() as i64, now],
        )?;
        Ok(ReportOutcome::Kept)
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
            "SELECT {COLUMNS} FROM {FROM} WHERE decision IS NULL AND expires_at_unix > ?1
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
            "SELECT {COLUMNS} FROM {FROM} WHERE decision IS NOT NULL OR expires_at_unix <= ?1
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

/// Creates the first schema where there is none, then migrates it to
/// [`SCHEMA_VERSION`] inside one immediate transaction (so two approvers
/// starting at once cannot both migrate).
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    match found {
        SCHEMA_VERSION => return Ok(()),
        0 => tx.execute_batch(MIGRATION_1)?,
        _ => {
            return Err(StoreError::NewerSchema {
                found,
                known: SCHEMA_VERSION,
            });
        }
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    // Strings only: serialising cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

fn json_column<T: serde::de::DeserializeOwned>(
    r: &rusqlite::Row<'_>,
    column: usize,
) -> rusqlite::Result<Option<T>> {
    let Some(text) = r.get::<_, Option<String>>(column)? else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, err.into())
    })
}

fn find(conn: &Connection, id: &str) -> Result<Option<StoredRequest>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM {FROM} WHERE request_id = ?1"),
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
            v2: version2(r)?,
        },
        received_at: r.get(8)?,
        decision: r.get(9)?,
        decided_by: r.get(10)?,
        decided_at: r.get(11)?,
        signature: r.get(12)?,
        signed_by: r.get(19)?,
        reported: match json_column::<Vec<ReportedVote>>(r, 20)? {
            Some(votes) => Some(Reported {
                votes,
                at: r.get(21)?,
            }),
            None => None,
        },
    })
}

fn version2(r: &rusqlite::Row<'_>) -> rusqlite::Result<Option<Version2>> {
    if r.get::<_, i64>(13)? != 2 {
        return Ok(None);
    }
    let threshold: i64 = r.get(17)?;
    let approvers: Option<Vec<ListedApprover>> = json_column(r, 18)?;
    Ok(Some(Version2 {
        agent_did: r.get(14)?,
        salt: r.get(15)?,
        policy_digest: r.get(16)?,
        threshold: u64::try_from(threshold).unwrap_or(0),
        approvers: approvers.unwrap_or_default(),
    }))
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

    const KEY: &str = "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw";

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
            v2: None,
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
        let sign = |r: &GateRequest| format!("sig:{}:{}", r.request_id, r.subject_digest);
        assert_eq!(
            store.decide("r1", Decision::Approved, "ann", 10, KEY, sign)?,
            Decided::Recorded
        );
        assert_eq!(
            store.decide("r1", Decision::Denied, "bob", 11, KEY, sign)?,
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
            store.decide("r2", Decision::Approved, "ann", 100, KEY, sign)?,
            Decided::Expired
        );
        assert_eq!(
            store.decide("nope", Decision::Approved, "ann", 1, KEY, sign)?,
            Decided::NotFound
        );
        Ok(())
    }

    #[test]
    fn the_database_itself_refuses_a_second_decision() -> Result<(), StoreError> {
        let store = Store::open_in_memory()?;
        store.insert_request(&request("r1", 100), 0)?;
        store.decide("r1", Decision::Denied, "ann", 10, KEY, |_| "s".to_owned())?;
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

    fn request_v2(id: &str, expires: i64) -> GateRequest {
        GateRequest {
            v2: Some(Version2 {
                agent_did: None,
                salt: "00".repeat(32),
                policy_digest: format!("sha256:{}", "cd".repeat(32)),
                threshold: 1,
                approvers: vec![ListedApprover {
                    did: KEY.to_owned(),
                    label: "alice".to_owned(),
                }],
            }),
            ..request(id, expires)
        }
    }

    /// A database as the first approver (schema 0) left it: one request
    /// decided, one waiting.
    fn schema_0_database(db: &Path) {
        private::create(db).unwrap();
        let conn = Connection::open(db).unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        for id in ["old1", "old2"] {
            conn.execute(
                "INSERT INTO requests (request_id, agent, server, tool, arguments, subject_digest,
                     expires_at, expires_at_unix, received_at)
                 VALUES (?1, 'a', 's', 't', '{}', 'sha256:ab', '2026-01-01T00:00:00Z', 100, 0)",
                [id],
            )
            .unwrap();
        }
        conn.execute(
            "UPDATE requests SET decision = 'approved', decided_by = 'ann', decided_at = 5,
                 signature = 'sig' WHERE request_id = 'old1'",
            [],
        )
        .unwrap();
    }

    #[test]
    fn a_schema_0_database_is_migrated_and_keeps_everything() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("approver.sqlite");
        schema_0_database(&db);
        let store = Store::open(&db)?;
        let old = store.request("old1")?.unwrap();
        assert_eq!(old.request.v2, None);
        assert_eq!(old.request.subject_digest, "sha256:ab");
        assert_eq!(
            (old.decision.as_deref(), old.decided_by.as_deref()),
            (Some("approved"), Some("ann"))
        );
        assert_eq!(
            (old.signature.as_deref(), old.signed_by),
            (Some("sig"), None)
        );
        assert_eq!(store.pending(0)?.len(), 1);
        // Still final after the migration.
        let sign = |_: &GateRequest| "s".to_owned();
        assert_eq!(
            store.decide("old1", Decision::Denied, "bob", 6, KEY, sign)?,
            Decided::AlreadyDecided
        );
        assert_eq!(
            store.decide("old2", Decision::Denied, "bob", 6, KEY, sign)?,
            Decided::Recorded
        );
        store.insert_request(&request_v2("new", 100), 1)?;
        assert_eq!(
            store.request("new")?.unwrap().request,
            request_v2("new", 100)
        );
        drop(store);
        // Opening again migrates nothing twice.
        let store = Store::open(&db)?;
        let version: i64 = store
            .conn()
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(store.history(200, 10)?.len(), 3);
        Ok(())
    }

    #[test]
    fn a_database_from_a_newer_approver_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("approver.sqlite");
        drop(Store::open(&db).unwrap());
        let conn = Connection::open(&db).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        let message = Store::open(&db)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains(&format!("schema version {}", SCHEMA_VERSION + 1)),
            "{message}"
        );
        assert!(message.contains("another --db"), "{message}");
    }

    #[test]
    fn a_version_2_request_round_trips_and_its_decision_names_its_key() -> Result<(), StoreError> {
        let store = Store::open_in_memory()?;
        let v2 = request_v2("r1", 100);
        assert_eq!(store.insert_request(&v2, 0)?, Inserted::New);
        assert_eq!(store.insert_request(&v2, 1)?, Inserted::Same);
        // The same id with another salt (so another call) conflicts.
        let mut other = v2.clone();
        if let Some(v2) = other.v2.as_mut() {
            v2.salt = "11".repeat(32);
        }
        assert_eq!(store.insert_request(&other, 1)?, Inserted::Conflict);
        // What an older approver would do: decide without naming the key.
        let unnamed = store.conn().execute(
            "UPDATE requests SET decision = 'approved', decided_by = 'x', signature = 'x'
             WHERE request_id = 'r1'",
            [],
        );
        assert!(unnamed.is_err());
        let sign = |r: &GateRequest| format!("v2:{}", r.v2.as_ref().map_or("", |v| &v.salt));
        store.decide("r1", Decision::Approved, "ann", 10, KEY, sign)?;
        let stored = store.request("r1")?.unwrap();
        assert_eq!(stored.signed_by.as_deref(), Some(KEY));
        assert_eq!(stored.signature, Some(format!("v2:{}", "00".repeat(32))));
        Ok(())
    }

    #[test]
    fn votes_are_reported_for_version_2_requests_only_and_never_shrink() -> Result<(), StoreError> {
        let store = Store::open_in_memory()?;
        store.insert_request(&request("v1", 100), 0)?;
        store.insert_request(&request_v2("v2", 100), 0)?;
        let vote = |label: &str| ReportedVote {
            approver: KEY.to_owned(),
            label: label.to_owned(),
            decision: "approved".to_owned(),
        };
        let two = [vote("a"), vote("b")];
        assert_eq!(
            store.report_votes("nope", &two, 1)?,
            ReportOutcome::NotFound
        );
        assert_eq!(
            store.report_votes("v1", &two, 1)?,
            ReportOutcome::NotVersion2
        );
        assert_eq!(store.report_votes("v2", &two, 1)?, ReportOutcome::Kept);
        // A report that arrives late, with fewer votes, is the older one.
        assert_eq!(store.report_votes("v2", &two[..1], 2)?, ReportOutcome::Kept);
        let reported = store.request("v2")?.unwrap().reported.unwrap();
        assert_eq!((reported.votes.as_slice(), reported.at), (&two[..], 1));
        assert_eq!(
            store
                .pending(0)?
                .iter()
                .filter(|r| r.reported.is_some())
                .count(),
            1
        );
        Ok(())
    }
}
