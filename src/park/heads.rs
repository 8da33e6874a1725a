//! A parked key's unresolved heads, by source offset: usually one, so a vector kept in order
//! rather than a `BTreeMap`, whose first node takes room for eleven (about 900 bytes a key:
//! 100,000 parked keys cost 90 MB more).

use chrono::{DateTime, Utc};

use super::event::Cause;

/// The record that parked its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Its source offset.
    pub offset: i64,
    /// Its dead letter's (or retry record's) id.
    pub id: String,
    /// Where it went.
    pub cause: Cause,
    /// When it first left (a head that leaves again keeps it: `park_max_age` counts from
    /// here).
    pub since: DateTime<Utc>,
    /// The park-log offset of its latest `head` event.
    pub event: i64,
}

/// The unresolved heads of one key, in source-offset order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heads(Vec<Head>);

impl Heads {
    /// The heads' source offsets, in order.
    pub fn keys(&self) -> impl Iterator<Item = &i64> {
        self.0.iter().map(|h| &h.offset)
    }

    /// The heads, in source-offset order.
    pub fn values(&self) -> impl Iterator<Item = &Head> {
        self.0.iter()
    }

    /// The head at source offset `offset`.
    pub fn get(&self, offset: &i64) -> Option<&Head> {
        self.find(*offset).ok().map(|i| &self.0[i])
    }

    /// Whether a head is at source offset `offset`.
    pub fn contains_key(&self, offset: &i64) -> bool {
        self.find(*offset).is_ok()
    }

    /// Puts `head` at source offset `offset` (its own), replacing the one there; returns that.
    pub fn insert(&mut self, offset: i64, head: Head) -> Option<Head> {
        debug_assert_eq!(offset, head.offset);
        match self.find(offset) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i], head)),
            Err(i) => {
                // Room for one more, not the four a first push takes.
                self.0.reserve_exact(1);
                self.0.insert(i, head);
                None
            }
        }
    }

    /// Takes the head at source offset `offset` out.
    pub fn remove(&mut self, offset: &i64) -> Option<Head> {
        let i = self.find(*offset).ok()?;
        let head = self.0.remove(i);
        if self.0.is_empty() {
            self.0 = Vec::new();
        }
        Some(head)
    }

    /// Whether none is left.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    fn find(&self, offset: i64) -> Result<usize, usize> {
        self.0.binary_search_by_key(&offset, |h| h.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(offset: i64) -> Head {
        Head {
            offset,
            id: format!("orders-0-{offset}"),
            cause: Cause::DeadLetter,
            since: chrono::DateTime::from_timestamp(1_765_000_000 + offset, 0).unwrap(),
            event: offset * 10,
        }
    }

    #[test]
    fn heads_stay_in_offset_order_and_one_per_offset() {
        let mut heads = Heads::default();
        assert!(heads.insert(7, head(7)).is_none());
        assert!(heads.insert(3, head(3)).is_none());
        assert!(heads.insert(9, head(9)).is_none());
        let again = Head {
            event: 99,
            ..head(7)
        };
        assert_eq!(heads.insert(7, again), Some(head(7)));
        assert_eq!(heads.keys().copied().collect::<Vec<_>>(), [3, 7, 9]);
        assert_eq!(heads.get(&7).map(|h| h.event), Some(99));
        assert!(heads.contains_key(&9) && !heads.contains_key(&8));
        assert_eq!(heads.remove(&3), Some(head(3)));
        assert_eq!(heads.remove(&3), None);
        assert_eq!(heads.values().next().map(|h| h.offset), Some(7));
        assert_eq!(heads.len(), 2);
        heads.remove(&7);
        heads.remove(&9);
        assert!(heads.is_empty());
    }
}
