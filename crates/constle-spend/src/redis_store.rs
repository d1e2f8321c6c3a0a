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
//! - `constle:spend:K:day:YYYY-MM-DD:by_source` and
//!   `constle:spend:K:month:YYYY-MM:by_source`: hashes of the day's and
//!   month's totals per source, one field per [`Source`](crate::Source) (a
//!   JSON array: `["mcp","accounting"]`, `["llm","anthropic","claude-…"]`);
//!   each expires like its total. Shown, never compared with a cap.
//!
//! A charge is one Lua script (EVALSHA, loaded on first use) that checks the
//! run, day and month caps and writes both totals and the source's, so
//! concurrent charges from any number of machines are serialized by Redis.
//! A settlement is another: it moves the hold's day and month totals and
//! the source's by the difference, without a cap check, never below zero. Every command is bounded
//! by [`constle_store::redis::TIMEOUT`]; a server that is down or does not
//! answer is a [`LedgerError`] and the call is refused. The connection
//! reconnects by itself once the server is back.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use constle_store::redis::{Connection, bounded};
use jiff::Timestamp;
use jiff::civil::Date;
use rust_decimal::Decimal;

use crate::amount::{Delta, Outcome, Tally, Units};
use crate::period::Month;
use crate::record::{Charge, RunRecord, Settlement, Stored};
use crate::source::{Source, SourceTotals, by_source};
use crate::{Cap, LedgerError, LedgerKey};

/// A hash's fields and values, as Redis returns them.
type Fields = HashMap<String, String>;

const DAY_TTL_SECONDS: u64 = 3 * 86_400;
const MONTH_TTL_SECONDS: u64 = 70 * 86_400;

/// What both scripts share. Totals are decimal strings added digit by
/// digit: Lua numbers are doubles, exact only to 2^53, and INCRBY cannot
/// check before it adds. Nothing is written until every check has passed,
/// since Redis does not roll a failed script back.
const HELPERS: &str = r"
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
-- a - b, or '0' when b is at least a.
local function sub(a, b)
  if at_most(a, b) then return '0' end
  local out, borrow, i, j = {}, 0, #a, #b
  while i > 0 do
    local s = a:byte(i) - 48 - borrow
    if j > 0 then s = s - (b:byte(j) - 48) end
    borrow = 0
    if s < 0 then s, borrow = s + 10, 1 end
    out[#out + 1] = string.char(48 + s)
    i, j = i - 1, j - 1
  end
  local diff = string.reverse(table.concat(out)):gsub('^0+', '')
  return diff
end
local function read(key, field)
  if field then return redis.call('HGET', key, field) or '0' end
  return redis.call('GET', key) or '0'
end
";

/// Checks and charges, all or nothing. See the module documentation.
const RESERVE: &str = r"
-- KEYS: day total, month total, last run (hash), day and month totals per
-- source (hashes).
-- ARGV: amount, run total before, run/day/month caps ('' for none),
-- day TTL, month TTL, run id, run start (fixed width, so it sorts as
-- text), largest total (i64::MAX), source field.
local before = { ARGV[2], read(KEYS[1]), read(KEYS[2]) }
for i = 2, 3 do
  if not canonical(before[i]) then
    return { 'corrupt', KEYS[i - 1], tostring(before[i]) }
  end
end
local by_source = { read(KEYS[4], ARGV[11]), read(KEYS[5], ARGV[11]) }
for i = 1, 2 do
  if not canonical(by_source[i]) then
    return { 'corrupt', KEYS[i + 3], tostring(by_source[i]) }
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
-- A source's total is part of its day's, so it cannot pass the largest.
redis.call('HSET', KEYS[4], ARGV[11], add(by_source[1], ARGV[1]))
redis.call('EXPIRE', KEYS[4], ARGV[6])
redis.call('HSET', KEYS[5], ARGV[11], add(by_source[2], ARGV[1]))
redis.call('EXPIRE', KEYS[5], ARGV[7])
if not last or last <= ARGV[9] then
  redis.call('HSET', KEYS[3], 'id', ARGV[8], 'started_at', ARGV[9], 'total', after[1])
end
redis.call('EXPIRE', KEYS[3], ARGV[7])
return { 'ok', after[1], after[2], after[3] }
";

/// Settles a hold, all or nothing: no cap check (the provider has billed).
const SETTLE: &str = r"
-- KEYS: as for a charge.
-- ARGV: '+' (above the hold) or '-' (below it), the difference, day TTL,
-- month TTL, run id, run total after, largest total (i64::MAX), source
-- field.
local keys = { KEYS[1], KEYS[2], KEYS[4], KEYS[5] }
local before = { read(KEYS[1]), read(KEYS[2]), read(KEYS[4], ARGV[8]),
  read(KEYS[5], ARGV[8]) }
for i = 1, 4 do
  if not canonical(before[i]) then
    return { 'corrupt', keys[i], tostring(before[i]) }
  end
end
local after = {}
for i = 1, 4 do
  if ARGV[1] == '+' then
    after[i] = add(before[i], ARGV[2])
    if not at_most(after[i], ARGV[7]) then after[i] = ARGV[7] end
  else
    after[i] = sub(before[i], ARGV[2])
  end
end
redis.call('SET', KEYS[1], after[1], 'EX', ARGV[3])
redis.call('SET', KEYS[2], after[2], 'EX', ARGV[4])
redis.call('HSET', KEYS[4], ARGV[8], after[3])
redis.call('EXPIRE', KEYS[4], ARGV[3])
redis.call('HSET', KEYS[5], ARGV[8], after[4])
redis.call('EXPIRE', KEYS[5], ARGV[4])
if redis.call('HGET', KEYS[3], 'id') == ARGV[5] then
  redis.call('HSET', KEYS[3], 'total', ARGV[6])
end
return { 'ok', after[1], after[2] }
";

static RESERVE_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{HELPERS}{RESERVE}")));
static SETTLE_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{HELPERS}{SETTLE}")));

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

    /// The keys both scripts take, in their order: day, month, last run,
    /// and the day's and month's per source.
    fn keys(&self, day: Date, month: Month) -> [String; 5] {
        let (day_key, month_key) = (self.day_key(day), self.month_key(month));
        let (day_sources, month_sources) = (by_source_key(&day_key), by_source_key(&month_key));
        [
            day_key,
            month_key,
            self.last_run_key(),
            day_sources,
            month_sources,
        ]
    }

    pub(crate) async fn charge(&self, charge: Charge) -> Result<Outcome, LedgerError> {
        let cap = |cap: Cap| {
            charge
                .limits
                .get(cap)
                .map_or_else(String::new, |limit| limit.units.raw().to_string())
        };
        let mut invocation = RESERVE_SCRIPT.prepare_invoke();
        for key in self.keys(charge.day, charge.month) {
            invocation.key(key);
        }
        invocation
            .arg(charge.amount.raw())
            .arg(charge.run_total.raw())
            .arg(cap(Cap::PerRun))
            .arg(cap(Cap::PerDay))
            .arg(cap(Cap::PerMonth))
            .arg(DAY_TTL_SECONDS)
            .arg(MONTH_TTL_SECONDS)
            .arg(&charge.run_id)
            .arg(sortable(charge.started_at))
            .arg(i64::MAX)
            .arg(charge.source.field());
        let mut conn = self.conn.manager();
        let reply: Vec<String> =
            bounded(self.conn.url(), invocation.invoke_async(&mut conn)).await?;
        self.outcome(&charge, &reply)
    }

    /// Applies `settlement` and returns the day's and month's totals after.
    pub(crate) async fn settle(
        &self,
        settlement: Settlement,
    ) -> Result<(Units, Units), LedgerError> {
        let (sign, difference) = match settlement.delta {
            Delta::Release(units) => ("-", units),
            Delta::Excess(units) => ("+", units),
        };
        let mut invocation = SETTLE_SCRIPT.prepare_invoke();
        for key in self.keys(settlement.day, settlement.month) {
            invocation.key(key);
        }
        invocation
            .arg(sign)
            .arg(difference.raw())
            .arg(DAY_TTL_SECONDS)
            .arg(MONTH_TTL_SECONDS)
            .arg(&settlement.run_id)
            .arg(settlement.run_total.raw())
            .arg(i64::MAX)
            .arg(settlement.source.field());
        let mut conn = self.conn.manager();
        let reply: Vec<String> =
            bounded(self.conn.url(), invocation.invoke_async(&mut conn)).await?;
        match reply.as_slice() {
            [status, day, month] if status == "ok" => Ok((
                self.units(&self.day_key(settlement.day), Some(day))?,
                self.units(&self.month_key(settlement.month), Some(month))?,
            )),
            [status, key, found] if status == "corrupt" => Err(self.corrupt(key, found)),
            _ => Err(self.unexpected("settle", &reply)),
        }
    }

    fn corrupt(&self, key: &str, found: &str) -> LedgerError {
        LedgerError::RedisCorrupt {
            url: self.conn.url().to_owned(),
            key: key.to_owned(),
            found: shorten(found),
        }
    }

    fn outcome(&self, charge: &Charge, reply: &[String]) -> Result<Outcome, LedgerError> {
        let tally = |totals: &[String]| -> Result<Tally, LedgerError> {
            match totals {
                [run, day, month] => Ok(Tally {
                    run: self.units("run total", Some(run))?,
                    day: self.units(&self.day_key(charge.day), Some(day))?,
                    month: self.units(&self.month_key(charge.month), Some(month))?,
                }),
                _ => Err(self.unexpected("reserve", reply)),
            }
        };
        let which = |name: &str| match name {
            "run" => Ok(Cap::PerRun),
            "day" => Ok(Cap::PerDay),
            "month" => Ok(Cap::PerMonth),
            _ => Err(self.unexpected("reserve", reply)),
        };
        match reply {
            [status, totals @ ..] if status == "ok" => Ok(Outcome::Charged(tally(totals)?)),
            [status, name, totals @ ..] if status == "refused" => {
                let cap = which(name)?;
                let limit = charge
                    .limits
                    .get(cap)
                    .ok_or_else(|| self.unexpected("reserve", reply))?;
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
            [status, key, found] if status == "corrupt" => Err(self.corrupt(key, found)),
            _ => Err(self.unexpected("reserve", reply)),
        }
    }

    fn unexpected(&self, script: &str, reply: &[String]) -> LedgerError {
        LedgerError::Redis {
            url: self.conn.url().to_owned(),
            message: format!(
                "unexpected reply from the {script} script: {}",
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
        let [
            day_key,
            month_key,
            last_key,
            day_sources_key,
            month_sources_key,
        ] = self.keys(day, month);
        let mut conn = self.conn.manager();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .get(&day_key)
            .get(&month_key)
            .hgetall(&last_key)
            .hgetall(&day_sources_key)
            .hgetall(&month_sources_key);
        let query = pipe.query_async(&mut conn);
        let (day_total, month_total, last, day_sources, month_sources): (
            Option<String>,
            Option<String>,
            Fields,
            Fields,
            Fields,
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
        let totals = SourceTotals {
            day: self.units(&day_key, day_total.as_ref())?.to_decimal(),
            month: self.units(&month_key, month_total.as_ref())?.to_decimal(),
        };
        let (by_source, unattributed) = by_source(
            self.sources(&day_sources_key, &day_sources)?,
            self.sources(&month_sources_key, &month_sources)?,
            totals,
        );
        Ok(Stored {
            day: totals.day,
            month: totals.month,
            last_run,
            by_source,
            unattributed,
        })
    }

    /// A per-source hash, read as strictly as a total.
    fn sources(&self, key: &str, hash: &Fields) -> Result<BTreeMap<Source, Decimal>, LedgerError> {
        hash.iter()
            .map(|(field, value)| {
                let source = Source::from_field(field).ok_or_else(|| self.corrupt(key, field))?;
                Ok((source, self.units(key, Some(value))?.to_decimal()))
            })
            .collect()
    }
}

/// The hash of a day's or month's totals per source.
fn by_source_key(period_key: &str) -> String {
    format!("{period_key}:by_source")
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
