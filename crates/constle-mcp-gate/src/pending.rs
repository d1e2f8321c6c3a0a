//! The ids of `tools/list` requests the gate forwarded and whose responses
//! have not come back: bounded, oldest forgotten first.
//!
//! Forgetting an id cannot let a tool list through unfiltered: the server
//! filter treats every response carrying `result.tools` as a `tools/list`
//! result whatever its id ([`crate::filter_server_message`]). What an id
//! adds is strictness: a response to a remembered id that carries no tool
//! list is malformed and not relayed.

use std::collections::VecDeque;

use crate::rpc::RequestId;

/// Most `tools/list` requests awaiting a response that the gate remembers;
/// past it, the oldest id is forgotten.
pub const MAX_PENDING_TOOLS_LISTS: usize = 1024;

/// Ids in the order they were sent. A linear search over at most
/// [`MAX_PENDING_TOOLS_LISTS`] ids costs nothing next to a network round
/// trip, and keeps one structure instead of a set and a queue to keep in
/// step.
#[derive(Debug)]
pub(crate) struct PendingLists {
    ids: VecDeque<RequestId>,
    capacity: usize,
}

impl PendingLists {
    pub(crate) fn new(capacity: usize) -> PendingLists {
        PendingLists {
            ids: VecDeque::new(),
            capacity,
        }
    }

    /// Remembers `id`, forgetting the oldest id if full. An id already
    /// remembered is kept once.
    pub(crate) fn insert(&mut self, id: RequestId) {
        if self.capacity == 0 || self.ids.contains(&id) {
            return;
        }
        if self.ids.len() == self.capacity {
            self.ids.pop_front();
        }
        self.ids.push_back(id);
    }

    /// Forgets `id`; whether it was remembered.
    pub(crate) fn take(&mut self, id: &RequestId) -> bool {
        match self.ids.iter().position(|pending| pending == id) {
            Some(index) => {
                self.ids.remove(index);
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_forgotten_once_answered() {
        let mut pending = PendingLists::new(MAX_PENDING_TOOLS_LISTS);
        pending.insert(RequestId::Int(1));
        pending.insert(RequestId::String("1".into()));
        pending.insert(RequestId::Int(1));
        assert_eq!(pending.len(), 2);
        assert!(pending.take(&RequestId::Int(1)));
        assert!(!pending.take(&RequestId::Int(1)));
        assert!(pending.take(&RequestId::String("1".into())));
        assert_eq!(pending.len(), 0);
    }

    #[test]
    fn the_oldest_id_is_forgotten_past_the_bound() {
        let mut pending = PendingLists::new(MAX_PENDING_TOOLS_LISTS);
        for id in 0..=i128::try_from(MAX_PENDING_TOOLS_LISTS).unwrap() {
            pending.insert(RequestId::Int(id));
        }
        assert_eq!(pending.len(), MAX_PENDING_TOOLS_LISTS);
        assert!(!pending.take(&RequestId::Int(0)));
        assert!(pending.take(&RequestId::Int(1)));
        assert!(pending.take(&RequestId::Int(1024)));
    }
}
