//! The Redis replay store: seen ids shared by every machine listening as one
//! identity.
//!
//! One key per message id, `constle:a2a:seen:<listener did>:<sender
//! did>:<msg_id>`, changed only by one Lua script ([`STEP`]), so Redis
//! orders every change to one id. The key expires when the envelope would
//! be refused as too old anyway (the remaining time to `until`, at least
//! one second; measured on the listener's clock, so Redis's own clock does
//! not matter).
//!
//! A command that times out may still run later: Redis had it, and runs it
//! when it wakes up. So an id cannot be recorded with one write whose
//! answer decides the message: a listener that answered 503 ("not
//! recorded") would leave a record behind, and the sender's resend would be
//! refused as a replay, the message never delivered. Instead each attempt
//! at an id draws a random token, and the key moves through three values:
//!
//! - `pending:<token>` (the attempt's *claim*, written only if the key is
//!   absent or abandoned by another attempt): if the claim's `OK` comes in
//!   time, this listener owns the id; it delivers the message, answers 202
//!   and marks the key `accepted:<token>`.
//! - `accepted:<token>`: delivered. Any later attempt is a replay (409).
//! - `abandoned:<token>`: the attempt failed or timed out and answered 503.
//!   Written right away, also if the claim has not arrived yet (then it
//!   never takes effect). Any later attempt may claim the id.
//!
//! While a key is pending, another attempt cannot tell whether its owner
//! will deliver, and is answered 503 `a2a_in_flight`. The owner settles the
//! key at once (and keeps trying until the id expires, if Redis does not
//! answer). A key left pending by a listener that died stays so until it
//! expires: resends get 503 until they are too old, never a second
//! delivery. Values written by older versions (`1`) count as accepted.
//!
//! Every command is bounded by [`constle_store::redis::TIMEOUT`]; a server
//! that is down, slow or answers anything else is a [`ReplayError`] and the
//! listener answers 503. The connection reconnects by itself once the
//! server is back.

use std::sync::LazyLock;
use std::time::Duration;

use constle_identity::DidKey;
use constle_store::redis::{Connection, bounded};
use jiff::Timestamp;

use crate::envelope::MsgId;
use crate::seen::{ReplayError, Seen};

/// Claims, accepts or abandons one id for one attempt. See the module
/// documentation.
const STEP: &str = r"
-- KEYS[1]: the id. ARGV: step (claim, accept, abandon), the attempt's
-- token, milliseconds to keep the key.
local v = redis.call('GET', KEYS[1])
local step, token, ms = ARGV[1], ARGV[2], ARGV[3]
if step == 'claim' then
  -- The claim of an attempt already abandoned stays abandoned.
  if not v or (v:sub(1, 10) == 'abandoned:' and v ~= 'abandoned:' .. token) then
    redis.call('SET', KEYS[1], 'pending:' .. token, 'PX', ms)
    return 'new'
  end
  if v:sub(1, 8) == 'pending:' then return 'in_flight' end
  return 'before'
elseif step == 'accept' then
  if v == 'pending:' .. token then
    redis.call('SET', KEYS[1], 'accepted:' .. token, 'PX', ms)
  end
elseif step == 'abandon' then
  if not v or v == 'pending:' .. token then
    redis.call('SET', KEYS[1], 'abandoned:' .. token, 'PX', ms)
  end
end
return 'settled'
";

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(STEP));

/// How long the owner of an attempt waits between tries to settle its key
/// while Redis does not answer.
const SETTLE_RETRY: Duration = Duration::from_millis(500);

pub(crate) struct Store {
    conn: Connection,
    prefix: String,
}

/// One attempt at recording one id.
#[derive(Clone)]
struct Attempt {
    key: String,
    token: String,
    until: Timestamp,
}

impl Store {
    pub(crate) async fn open(url: &str, listener: &DidKey) -> Result<Store, ReplayError> {
        Ok(Store {
            conn: constle_store::redis::connect(url).await?,
            prefix: format!("constle:a2a:seen:{listener}"),
        })
    }

    pub(crate) fn url(&self) -> &str {
        self.conn.url()
    }

    pub(crate) async fn remember(
        &self,
        from: &DidKey,
        msg_id: &MsgId,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<Seen, ReplayError> {
        let mut token = [0u8; 16];
        getrandom::fill(&mut token).map_err(|err| ReplayError::Redis {
            url: self.conn.url().to_owned(),
            message: format!("no random bytes for the attempt's token: {err}"),
        })?;
        let attempt = Attempt {
            key: format!("{}:{from}:{msg_id}", self.prefix),
            token: hex::encode(token),
            until,
        };
        let claimed = step(&self.conn, "claim", &attempt, now).await;
        let seen = claimed.and_then(|reply| match reply.as_str() {
            "new" => Ok(Seen::New),
            "in_flight" => Ok(Seen::InFlight),
            "before" => Ok(Seen::Before),
            other => Err(ReplayError::Redis {
                url: self.conn.url().to_owned(),
                message: format!(
                    "unexpected reply to a claim: {}",
                    crate::envelope::shorten(other)
                ),
            }),
        });
        match &seen {
            // Delivered as soon as this returns: mark it so, now if Redis
            // answers, or later.
            Ok(Seen::New) => {
                if step(&self.conn, "accept", &attempt, Timestamp::now())
                    .await
                    .is_err()
                {
                    settle_later(self.conn.clone(), "accept", attempt);
                }
            }
            Ok(_) => {}
            // The claim may still run: make sure it counts for nothing.
            Err(_) => settle_later(self.conn.clone(), "abandon", attempt),
        }
        seen
    }
}

/// Runs one step of [`STEP`] for `attempt`, within the bound.
async fn step(
    conn: &Connection,
    name: &str,
    attempt: &Attempt,
    now: Timestamp,
) -> Result<String, ReplayError> {
    let ms = attempt
        .until
        .duration_since(now)
        .as_millis()
        .clamp(1000, i128::from(i64::MAX)) as i64;
    let mut manager = conn.manager();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(&attempt.key)
        .arg(name)
        .arg(&attempt.token)
        .arg(ms);
    Ok(bounded(conn.url(), invocation.invoke_async(&mut manager)).await?)
}

/// Keeps trying `name` for `attempt` until Redis has run it, or the id has
/// expired and no longer matters.
fn settle_later(conn: Connection, name: &'static str, attempt: Attempt) {
    tokio::spawn(async move {
        loop {
            let now = Timestamp::now();
            if now > attempt.until || step(&conn, name, &attempt, now).await.is_ok() {
                return;
            }
            tokio::time::sleep(SETTLE_RETRY).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value before, the step taken by attempt `t`, its reply, the value
    /// after (`None`: absent).
    const STEPS: [(Option<&str>, &str, &str, Option<&str>); 13] = [
        (None, "claim", "new", Some("pending:t")),
        (Some("abandoned:u"), "claim", "new", Some("pending:t")),
        // A claim Redis runs after its attempt was abandoned counts for nothing.
        (Some("abandoned:t"), "claim", "before", Some("abandoned:t")),
        (Some("pending:u"), "claim", "in_flight", Some("pending:u")),
        (Some("accepted:u"), "claim", "before", Some("accepted:u")),
        // What older versions wrote.
        (Some("1"), "claim", "before", Some("1")),
        (Some("pending:t"), "accept", "settled", Some("accepted:t")),
        (Some("pending:u"), "accept", "settled", Some("pending:u")),
        (
            Some("abandoned:t"),
            "accept",
            "settled",
            Some("abandoned:t"),
        ),
        // Abandoned before its claim arrived: the claim then never takes effect.
        (None, "abandon", "settled", Some("abandoned:t")),
        (Some("pending:t"), "abandon", "settled", Some("abandoned:t")),
        (Some("pending:u"), "abandon", "settled", Some("pending:u")),
        (Some("accepted:u"), "abandon", "settled", Some("accepted:u")),
    ];

    #[tokio::test]
    async fn each_step_moves_the_key_as_documented() {
        if !constle_testkit::require_tools("the replay script's steps", &["redis-server"]) {
            return;
        }
        let redis = constle_testkit::RedisServer::start().unwrap();
        let conn = constle_store::redis::connect(&redis.url()).await.unwrap();
        let now = Timestamp::now();
        for (n, (before, name, reply, after)) in STEPS.into_iter().enumerate() {
            let attempt = Attempt {
                key: format!("k{n}"),
                token: "t".to_owned(),
                until: now + jiff::SignedDuration::from_mins(6),
            };
            let mut manager = conn.manager();
            if let Some(value) = before {
                let set = redis::cmd("SET").arg(&attempt.key).arg(value).clone();
                set.query_async::<()>(&mut manager).await.unwrap();
            }
            let got = step(&conn, name, &attempt, now).await.unwrap();
            let get = redis::cmd("GET").arg(&attempt.key).clone();
            let value: Option<String> = get.query_async(&mut manager).await.unwrap();
            assert_eq!(
                (got.as_str(), value.as_deref()),
                (reply, after),
                "{name} on {before:?}"
            );
        }
    }
}
