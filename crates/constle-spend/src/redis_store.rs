//! The Redis store: day and month totals shared by every machine that runs
//! the agent.
//!
//! Keys, for a [`LedgerKey`] `K` (all strings are decimal integers in units
//! of 10⁻¹⁰ USD):
//!
//! - `constle:spend:K:day:YYYY-MM-DD`: the UTC day's total; expires 3 days
//!   after its last charge.
//! - `constle:spend:K:month:YYYY-MM`: the UTC month's total; expires 70 days
//!   after its last charge.
//! - `constle:spend:K:last_run`: a hash (`id`, `started_at`, `total`) of the
//!   newest run charged; expires like a month.
//!
//! A charge is one Lua script (EVALSHA, loaded on first use) that checks the
//! run, day and month caps and writes both totals, so concurrent charges from
//! any number of machines are serialized by Redis. Every command is bounded
//! by [`constle_store::redis::TIMEOUT`]; a server that is down or does not
//! answer is a [`LedgerError`] and the call is refused. The connection
//! reconnects by itself once the server is back.

use std::collections::HashMap;
use std::sync::LazyLock;

use constle_store::redis::{Connection, bounded};
use jiff::Timestamp;
use jiff::civil::Date;

use crate::amount::{Outcome, Tally, Units};
use crate::period::Month;
use crate::record::{Charge, RunRecord, Stored};
use crate::{Cap, LedgerError, LedgerKey};

const DAY_TTL_SECONDS: u64 = 3 * 86_400;
const MONTH_TTL_SECONDS: u64 = 70 * 86_400;

/// Checks and charges, all or nothing. See the module documentation.
const RESERVE: &str = r"
-- KEYS: day total, month total, last run (hash).
-- ARGV: amount, run total before, run/day/month caps ('' for none),
-- day TTL, month TTL, run id, run start (fixed width, so it sorts as
-- text), largest total (i64::MAX).
--
-- Totals are decimal strings added digit by digit: Lua numbers are doubles,
-- exact only to 2^53, and INCRBY cannot check before it adds. Nothing is
-- written until every check has passed, since Redis does not roll a failed
-- script back.
local function canonical(s)
  return type(s) == 'string' and s:match('^%d+$') ~= nil
    and (s == '0' or s:sub(1, 1) ~= '0')
end
local function add(a, b)
  local out, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local s = carry
    if i > 0 then s = s + a:byte(i) - 48 end
    if j > 0 then s = s + b:byte(j) - 48 end
    out[#out + 1] = string.char(48 + s % 10)
    carry = math.floor(s / 10)
    i, j = i - 1, j - 1
  end
  return string.reverse(table.concat(out))
end
local function at_most(a, b)
  if #a ~= #b then return #a < #b end
  return a <= b
end
local before = { ARGV[2], redis.call('GET', KEYS[1]) or '0',
  redis.call('GET', KEYS[2]) or '0' }
for i = 2, 3 do
  if not canonical(before[i]) then
    return { 'corrupt', KEYS[i - 1], tostring(before[i]) }
  end
end
local last = redis.call('HGET', KEYS[3], 'started_at')
local names = { 'run', 'day', 'month' }
local after = {}
for i = 1, 3 do
  after[i] = add(before[i], ARGV[1])
  local cap = ARGV[i + 2]
  if cap ~= '' and not at_most(after[i], cap) then
    return { 'refused', names[i], before[1], before[2], before[3] }
  end
  if not at_most(after[i], ARGV[10]) then
    return { 'overflow', names[i], before[1], before[2], before[3] }
  end
end
redis.call('SET', KEYS[1], after[2], 'EX', ARGV[6])
redis.call('SET', KEYS[2], after[3], 'EX', ARGV[7])
if not last or last <= ARGV[9] then
  redis.call('HSET', KEYS[3], 'id', ARGV[8], 'started_at', ARGV[9], 'total', after[1])
end
redis.call('EXPIRE', KEYS[3], ARGV[7])
return { 'ok', after[1], after[2], after[3] }
";

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RESERVE));

/// One key's totals in one Redis.
pub(crate) struct Store {
    conn: Connection,
    prefix: String,
}

impl Store {
    pub(crate) async fn open(url: &str, key: &LedgerKey) -> Result<Store, LedgerError> {
        Ok(Store {
            conn: constle_store::redis::connect(url).await?,
            prefix: format!("constle:spend:{key}"),
        })
    }

    pub(crate) fn url(&self) -> &str {
        self.conn.url()
    }

    fn day_key(&self, day: Date) -> String {
        format!("{}:day:{day}", self.prefix)
    }

    fn month_key(&self, month: Month) -> String {
        format!("{}:month:{month}", self.prefix)
    }

    fn last_run_key(&self) -> String {
        format!("{}:last_run", self.prefix)
    }

    pub(crate) async fn charge(&self, charge: Charge) -> Result<Outcome, LedgerError> {
        let cap = |cap: Cap| {
            charge
                .limits
                .get(cap)
                .map_or_else(String::new, |limit| limit.units.raw().to_string())
        };
        let mut invocation = SCRIPT.prepare_invoke();
        invocation
            .key(self.day_key(charge.day))
            .key(self.month_key(charge.month))
            .key(self.last_run_key())
            .arg(charge.amount.raw())
            .arg(charge.run_total.raw())
            .arg(cap(Cap::PerRun))
            .arg(cap(Cap::PerDay))
            .arg(cap(Cap::PerMonth))
            .arg(DAY_TTL_SECONDS)
            .arg(MONTH_TTL_SECONDS)
            .arg(&charge.run_id)
            .arg(sortable(charge.started_at))
            .arg(i64::MAX);
        let mut conn = self.conn.manager();
        let reply: Vec<String> =
            bounded(self.conn.url(), invocation.invoke_async(&mut conn)).await?;
        self.outcome(&charge, &reply)
    }

    fn outcome(&self, charge: &Charge, reply: &[String]) -> Result<Outcome, LedgerError> {
        let tally = |totals: &[String]| -> Result<Tally, LedgerError> {
            match totals {
                [run, day, month] => Ok(Tally {
                    run: self.units("run total", Some(run))?,
                    day: self.units(&self.day_key(charge.day), Some(day))?,
                    month: self.units(&self.month_key(charge.month), Some(month))?,
                }),
                _ => Err(self.unexpected(reply)),
            }
        };
        let which = |name: &str| match name {
            "run" => Ok(Cap::PerRun),
            "day" => Ok(Cap::PerDay),
            "month" => Ok(Cap::PerMonth),
            _ => Err(self.unexpected(reply)),
        };
        match reply {
            [status, totals @ ..] if status == "ok" => Ok(Outcome::Charged(tally(totals)?)),
            [status, name, totals @ ..] if status == "refused" => {
                let cap = which(name)?;
                let limit = charge
                    .limits
                    .get(cap)
                    .ok_or_else(|| self.unexpected(reply))?;
                Ok(Outcome::Refused {
                    cap,
                    limit: limit.usd,
                    before: tally(totals)?,
                })
            }
            [status, name, totals @ ..] if status == "overflow" => Ok(Outcome::Overflow {
                total: which(name)?,
                before: tally(totals)?,
            }),
            [status, key, found] if status == "corrupt" => Err(LedgerError::RedisCorrupt {
                url: self.conn.url().to_owned(),
                key: key.clone(),
                found: shorten(found),
            }),
            _ => Err(self.unexpected(reply)),
        }
    }

    fn unexpected(&self, reply: &[String]) -> LedgerError {
        LedgerError::Redis {
            url: self.conn.url().to_owned(),
            message: format!(
                "unexpected reply from the reserve script: {}",
                shorten(&reply.join(" "))
            ),
        }
    }

    /// A stored total: absent is zero, anything but a non-negative `i64`
    /// written as the script writes it is an error (never read as zero).
    fn units(&self, key: &str, value: Option<&String>) -> Result<Units, LedgerError> {
        let Some(value) = value else {
            return Ok(Units::ZERO);
        };
        // The script's rule exactly: digits only, no leading zero.
        let canonical =
            value.bytes().all(|b| b.is_ascii_digit()) && (value == "0" || !value.starts_with('0'));
        canonical
            .then(|| value.parse::<i64>().ok())
            .flatten()
            .and_then(Units::from_raw)
            .ok_or_else(|| LedgerError::RedisCorrupt {
                url: self.conn.url().to_owned(),
                key: key.to_owned(),
                found: shorten(value),
            })
    }

    pub(crate) async fn stored(&self, day: Date, month: Month) -> Result<Stored, LedgerError> {
        let (day_key, month_key, last_key) = (
            self.day_key(day),
            self.month_key(month),
            self.last_run_key(),
        );
        let mut conn = self.conn.manager();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .get(&day_key)
            .get(&month_key)
            .hgetall(&last_key);
        let query = pipe.query_async(&mut conn);
        let (day_total, month_total, last): (
            Option<String>,
            Option<String>,
            HashMap<String, String>,
        ) = bounded(self.conn.url(), query).await?;
        let last_run = if last.is_empty() {
            None
        } else {
            let field = |name: &str| {
                last.get(name).ok_or_else(|| LedgerError::RedisCorrupt {
                    url: self.conn.url().to_owned(),
                    key: last_key.clone(),
                    found: format!("a hash without `{name}`"),
                })
            };
            let started_at = field("started_at")?;
            Some(RunRecord {
                id: field("id")?.clone(),
                started_at: started_at.parse().map_err(|_| LedgerError::RedisCorrupt {
                    url: self.conn.url().to_owned(),
                    key: last_key.clone(),
                    found: shorten(started_at),
                })?,
                total: self.units(&last_key, Some(field("total")?))?.to_decimal(),
            })
        };
        Ok(Stored {
            day: self.units(&day_key, day_total.as_ref())?.to_decimal(),
            month: self.units(&month_key, month_total.as_ref())?.to_decimal(),
            last_run,
        })
    }
}

/// RFC 3339 in UTC with all nine fractional digits: fixed width, so the
/// script can compare two starts as text.
fn sortable(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S.%NZ").to_string()
}

fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_sort_as_text() {
        let a: Timestamp = "2026-04-01T09:59:59.9Z".parse().unwrap();
        let b: Timestamp = "2026-04-01T10:00:00Z".parse().unwrap();
        assert_eq!(sortable(a), "2026-04-01T09:59:59.900000000Z");
        assert!(sortable(a) < sortable(b));
        assert_eq!(sortable(b).parse::<Timestamp>().unwrap(), b);
    }
}
