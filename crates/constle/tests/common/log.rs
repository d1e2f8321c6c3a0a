//! Reading an agent's log back whole, and writing it again as whoever holds
//! the agent's key can: a new chain, every entry re-signed.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use constle_audit::{Appender, DayFile, Event};
use constle_identity::{Name, SigningIdentity};
use jiff::Timestamp;
use serde_json::Value;

/// The members every entry has, which the writer sets.
const ENVELOPE: [&str; 8] = ["v", "seq", "ts", "agent", "event", "prev", "did", "sig"];

/// Every entry of `agent`'s log in `dir`, all days in order, as JSON.
pub fn read_entries(dir: &Path, agent: &Name) -> Vec<Value> {
    let mut days: Vec<DayFile> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| DayFile::from_path(&e.unwrap().path()))
        .filter(|d| &d.agent == agent)
        .collect();
    days.sort_by_key(|d| d.date);
    days.iter()
        .flat_map(|d| {
            let text = fs::read_to_string(d.path()).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// Writes `entries` (read from a log, envelope and all, then edited,
/// removed or added to at will) into the empty `dir` as a new chain of
/// `agent`, signed with `key`: each entry's event, fields and time kept, its
/// `seq`, `prev` and signature made anew, and a head anchor. So the result
/// verifies as a chain. The day files written, oldest first.
pub fn reseal(entries: &[Value], dir: &Path, agent: &Name, key: SigningIdentity) -> Vec<PathBuf> {
    let times: Vec<Timestamp> = entries
        .iter()
        .map(|e| e["ts"].as_str().unwrap().parse().unwrap())
        .collect();
    let times = Mutex::new(times.into_iter());
    let events = entries.iter().map(event_of).collect();
    let written = Appender::new(dir, agent.clone(), Some(key))
        .unwrap()
        .with_clock(move || times.lock().unwrap().next().unwrap())
        .append(events)
        .unwrap();
    let mut files: Vec<PathBuf> = written.into_iter().map(|w| w.path).collect();
    files.dedup();
    files
}

/// The event an entry records, without its envelope.
fn event_of(entry: &Value) -> Event {
    let fields = entry
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !ENVELOPE.contains(&k.as_str()));
    let name = entry["event"].as_str().unwrap();
    fields.fold(Event::new(name).unwrap(), |event, (k, v)| {
        event.with(k, v.clone()).unwrap()
    })
}
