//! A map with a bound: once full, adding a new entry forgets the oldest. Schemas are few and
//! never change under an id, so first-in-first-out is enough; the bound only keeps a topic
//! that names endless ids (or a hostile one) from growing the sidecar without end.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// At most `bound` entries, the oldest forgotten first.
#[derive(Debug)]
pub struct Bounded<K, V> {
    bound: usize,
    entries: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: Eq + Hash + Clone, V: Clone> Bounded<K, V> {
    /// An empty map holding at most `bound` entries (at least one).
    pub fn new(bound: usize) -> Self {
        Self {
            bound: bound.max(1),
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The value under `key`, if it is still held.
    pub fn get(&self, key: &K) -> Option<V> {
        self.entries.get(key).cloned()
    }

    /// Holds `value` under `key`, forgetting the oldest entry if the map is full.
    pub fn insert(&mut self, key: K, value: V) {
        if self.entries.insert(key.clone(), value).is_some() {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > self.bound {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }

    /// How many entries are held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cache_forgets_its_oldest_entry() {
        let mut cache = Bounded::new(2);
        cache.insert(1, "a");
        cache.insert(2, "b");
        cache.insert(1, "a again");
        cache.insert(3, "c");
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&1), None);
        assert_eq!(cache.get(&2), Some("b"));
        assert_eq!(cache.get(&3), Some("c"));
    }
}
