//! `human_gates.approvers`, `threshold` and `terminal_approves`: several
//! approvers, of whom `threshold` must approve (protocol v2), instead of
//! the one `approver_pubkey`.

use std::collections::HashSet;

use super::V;
use crate::de::Located;
use crate::model::{MAX_APPROVERS, NamedApprover, Quorum};
use crate::raw::{RawApprover, RawHumanGates};
use crate::values::InvalidValue;

/// Longest approver label, in bytes.
const MAX_LABEL_BYTES: usize = 64;

impl V<'_, '_> {
    /// The quorum `h` declares: `Some(None)` when it names no
    /// `approvers` (nor `threshold` or `terminal_approves`), `None` when
    /// it is invalid (each error reported).
    pub(super) fn quorum(&mut self, raw: &Located<RawHumanGates>) -> Option<Option<Quorum>> {
        let h = &raw.value;
        let Some(list) = &h.approvers.0 else {
            for (present, field) in [
                (h.threshold.0.as_ref().map(|t| t.pos), "threshold"),
                (
                    h.terminal_approves.0.as_ref().map(|t| t.pos),
                    "terminal_approves",
                ),
            ] {
                if let Some(pos) = present {
                    let message = format!("human_gates.{field} is set but there are no approvers");
                    let help = "list the approvers (did and label) under human_gates.approvers, or remove it";
                    self.sink
                        .error("quorum_without_approvers", pos, message, Some(help.into()));
                    return None;
                }
            }
            return Some(None);
        };
        if let Some(single) = &h.approver_pubkey.0 {
            let message = "human_gates has both approver_pubkey and approvers";
            let help = "keep one: approver_pubkey for one approver, approvers (with threshold) for several";
            self.sink
                .error("approvers_conflict", single.pos, message, Some(help.into()));
            return None;
        }
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
        let terminal_approves = h.terminal_approves.0.as_ref().is_some_and(|t| t.value);
        Some(Some(Quorum {
            approvers,
            threshold,
            terminal_approves,
        }))
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
