//! `human_gates.approvers` with `threshold`, or `approver_set`, and
//! `terminal_approves`: several approvers, of whom a threshold must approve
//! (protocol v2), instead of the one `approver_pubkey`.

use std::collections::HashSet;

use super::context::V;
use crate::de::Located;
use crate::diagnostic::Pos;
use crate::model::{ApproverSetRef, MAX_APPROVERS, NamedApprover, Quorum, QuorumSource};
use crate::raw::{RawApprover, RawApproverSet, RawHumanGates};
use crate::values::InvalidValue;

/// Longest approver label, in bytes.
const MAX_LABEL_BYTES: usize = 64;

impl V<'_, '_> {
    /// The quorum `h` declares: `Some(None)` when it names neither
    /// `approvers` nor `approver_set` (nor `threshold` or
    /// `terminal_approves`), `None` when it is invalid (each error
    /// reported).
    pub(super) fn quorum(&mut self, raw: &Located<RawHumanGates>) -> Option<Option<Quorum>> {
        let h = &raw.value;
        let source = match (&h.approvers.0, &h.approver_set.0) {
            (None, None) => return self.no_quorum(h),
            (Some(_), Some(set)) => return self.conflict(set.pos, "approvers and approver_set"),
            (_, _) if h.approver_pubkey.0.is_some() => {
                let pos = h.approver_pubkey.0.as_ref().map_or(raw.pos, |p| p.pos);
                return self.conflict(pos, "approver_pubkey and several approvers");
            }
            (Some(list), None) => self.listed(list, h)?,
            (None, Some(set)) => {
                if let Some(t) = &h.threshold.0 {
                    let message =
                        "human_gates.threshold is set, but the approver set gives the threshold";
                    let help =
                        "remove threshold: each version of the set says how many must approve";
                    self.sink
                        .error("approvers_conflict", t.pos, message, Some(help.into()));
                    return None;
                }
                QuorumSource::Set(self.approver_set(set)?)
            }
        };
        let terminal_approves = h.terminal_approves.0.as_ref().is_some_and(|t| t.value);
        Some(Some(Quorum {
            source,
            terminal_approves,
        }))
    }

    /// `Some(None)`, unless `threshold` or `terminal_approves` is set
    /// without approvers.
    fn no_quorum(&mut self, h: &RawHumanGates) -> Option<Option<Quorum>> {
        for (present, field) in [
            (h.threshold.0.as_ref().map(|t| t.pos), "threshold"),
            (
                h.terminal_approves.0.as_ref().map(|t| t.pos),
                "terminal_approves",
            ),
        ] {
            if let Some(pos) = present {
                let message = format!("human_gates.{field} is set but there are no approvers");
                let help = "list the approvers under human_gates.approvers (or name an approver_set), or remove it";
                self.sink
                    .error("quorum_without_approvers", pos, message, Some(help.into()));
                return None;
            }
        }
        Some(None)
    }

    fn conflict(&mut self, pos: Pos, what: &str) -> Option<Option<Quorum>> {
        let message = format!("human_gates has both {what}");
        let help = "keep one: approver_pubkey for one approver, approvers (with threshold) for several, or approver_set for a signed, versioned set";
        self.sink
            .error("approvers_conflict", pos, message, Some(help.into()));
        None
    }

    fn listed(
        &mut self,
        list: &Located<Vec<Located<RawApprover>>>,
        h: &RawHumanGates,
    ) -> Option<QuorumSource> {
        let approvers = self.approvers(list)?;
        let threshold = match &h.threshold.0 {
            None => 1,
            Some(t) => match usize::try_from(t.value) {
                Ok(k) if (1..=approvers.len()).contains(&k) => k,
                _ => {
                    let n = approvers.len();
                    let message = format!(
                        "threshold is {}; with {n} approvers it must be from 1 to {n}",
                        t.value
                    );
                    let help = format!("write how many of the {n} approvers must approve a call");
                    self.sink.error("out_of_range", t.pos, message, Some(help));
                    return None;
                }
            },
        };
        Some(QuorumSource::Listed {
            approvers,
            threshold,
        })
    }

    fn approver_set(&mut self, set: &Located<RawApproverSet>) -> Option<ApproverSetRef> {
        let s = &set.value;
        let help = "write approver_set: {dir: ./approvers, pin: sha256:…}, the pin as `constle approvers show` prints it";
        let dir = self
            .required(&s.dir, "human_gates.approver_set.dir", set.pos, help)
            .and_then(|d| self.path(d));
        let pin = self
            .required(&s.pin, "human_gates.approver_set.pin", set.pos, help)
            .and_then(|p| self.check(p, "invalid_pin", check_pin));
        Some(ApproverSetRef {
            dir: dir?,
            pin: pin?,
        })
    }

    fn approvers(
        &mut self,
        list: &Located<Vec<Located<RawApprover>>>,
    ) -> Option<Vec<NamedApprover>> {
        if list.value.is_empty() || list.value.len() > MAX_APPROVERS {
            let message = format!(
                "human_gates.approvers has {} entries; it needs 1 to {MAX_APPROVERS}",
                list.value.len()
            );
            let help = "list each approver once: {did: did:key:…, label: alice}";
            self.sink
                .error("out_of_range", list.pos, message, Some(help.into()));
            return None;
        }
        let (mut dids, mut labels) = (HashSet::new(), HashSet::new());
        let mut ok = true;
        let mut approvers = Vec::new();
        for item in &list.value {
            let Some(approver) = self.approver(item) else {
                ok = false;
                continue;
            };
            let dup = if !dids.insert(approver.did.clone()) {
                Some("key")
            } else if !labels.insert(approver.label.clone()) {
                Some("label")
            } else {
                None
            };
            if let Some(what) = dup {
                let message = format!("approver {:?}: this {what} is listed twice", approver.label);
                let help = "each approver has a key and a label of their own";
                self.sink
                    .error("duplicate_approver", item.pos, message, Some(help.into()));
                ok = false;
            }
            approvers.push(approver);
        }
        ok.then_some(approvers)
    }

    fn approver(&mut self, item: &Located<RawApprover>) -> Option<NamedApprover> {
        let a = &item.value;
        let help = "write each approver as {did: did:key:…, label: alice}";
        let did = self
            .required(&a.did, "human_gates.approvers[].did", item.pos, help)
            .and_then(|d| self.did(d, "an approver's did"));
        let label = self
            .required(&a.label, "human_gates.approvers[].label", item.pos, help)
            .and_then(|l| self.check(l, "invalid_label", check_label));
        Some(NamedApprover {
            did: did?,
            label: label?,
        })
    }
}

fn check_label(label: &str) -> Result<String, InvalidValue> {
    let printable = label.chars().all(|c| !c.is_control());
    if label.is_empty() || label.len() > MAX_LABEL_BYTES || !printable || label.trim() != label {
        return Err(InvalidValue {
            message: format!(
                "approver label {label:?} is not 1 to {MAX_LABEL_BYTES} printable characters"
            ),
            help: Some("name who holds the key, e.g. label: alice".into()),
        });
    }
    Ok(label.to_owned())
}

fn check_pin(pin: &str) -> Result<String, InvalidValue> {
    let hex = pin.strip_prefix("sha256:").unwrap_or_default();
    let lower_hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    if hex.len() != 64 || !hex.chars().all(lower_hex) {
        return Err(InvalidValue {
            message: format!("approver_set.pin {pin:?} is not sha256: and 64 lowercase hex digits"),
            help: Some("copy the pin `constle approvers show DIR` prints for version 1".into()),
        });
    }
    Ok(pin.to_owned())
}
