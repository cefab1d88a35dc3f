//! A fixed-universe bitset over node indices, the representation of every sub-graph.
//!
//! Sets are compared by their elements only: two sets with the same elements are equal (and hash
//! alike) whatever their universe. The order is lexicographic over the ascending element
//! sequences, so sets sort by their first element first (`{0,5} < {1} < {1,2} < {2}`).
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

const BITS: usize = u64::BITS as usize;

/// A set of indices in `0..universe`, stored as one bit per index.
#[derive(Clone, Default)]
pub struct IndexSet {
    universe: usize,
    words: Vec<u64>,
}

impl IndexSet {
    /// The empty set over `0..universe`.
    pub fn new(universe: usize) -> Self {
        IndexSet {
            universe,
            words: vec![0; universe.div_ceil(BITS)],
        }
    }

    /// The set of `indices` over `0..universe`.
    ///
    /// # Panics
    /// If an index is not below `universe`.
    pub fn from_indices(universe: usize, indices: impl IntoIterator<Item = usize>) -> Self {
        let mut s = IndexSet::new(universe);
        for i in indices {
            s.insert(i);
        }
        s
    }

    /// The set `{i}` over `0..universe`.
    ///
    /// # Panics
    /// If `i` is not below `universe`.
    pub fn singleton(universe: usize, i: usize) -> Self {
        IndexSet::from_indices(universe, [i])
    }

    /// Every index of `0..universe`.
    pub fn full(universe: usize) -> Self {
        IndexSet::from_indices(universe, 0..universe)
    }

    /// The size of the universe (one more than the largest index the set may hold).
    pub fn universe(&self) -> usize {
        self.universe
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True if the set has no element.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// True if `i` is in the set (false for indices outside the universe).
    pub fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / BITS)
            .is_some_and(|w| w & (1 << (i % BITS)) != 0)
    }

    /// Adds `i`; returns true if it was not already there.
    ///
    /// # Panics
    /// If `i` is not below the universe.
    pub fn insert(&mut self, i: usize) -> bool {
        assert!(
            i < self.universe,
            "index {i} outside universe {}",
            self.universe
        );
        let w = &mut self.words[i / BITS];
        let bit = 1 << (i % BITS);
        let fresh = *w & bit == 0;
        *w |= bit;
        fresh
    }

    /// Removes `i`; returns true if it was there.
    pub fn remove(&mut self, i: usize) -> bool {
        match self.words.get_mut(i / BITS) {
            Some(w) => {
                let bit = 1 << (i % BITS);
                let had = *w & bit != 0;
                *w &= !bit;
                had
            }
            None => false,
        }
    }

    /// Elements in either set; the universe is the larger of the two.
    pub fn union(&self, other: &IndexSet) -> IndexSet {
        let mut r = self.widened(other.universe);
        r.union_with(other);
        r
    }

    /// Adds every element of `other`, widening the universe if needed.
    pub fn union_with(&mut self, other: &IndexSet) {
        if other.universe > self.universe {
            *self = self.widened(other.universe);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// Elements in both sets, over this set's universe.
    pub fn intersection(&self, other: &IndexSet) -> IndexSet {
        let mut r = self.clone();
        for (i, a) in r.words.iter_mut().enumerate() {
            *a &= other.words.get(i).copied().unwrap_or(0);
        }
        r
    }

    /// Elements of this set not in `other`, over this set's universe.
    pub fn difference(&self, other: &IndexSet) -> IndexSet {
        let mut r = self.clone();
        for (a, b) in r.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
        r
    }

    /// True if every element of this set is in `other`.
    pub fn is_subset(&self, other: &IndexSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, &a)| a & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// True if the sets share an element.
    pub fn intersects(&self, other: &IndexSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// True if the sets share no element.
    pub fn is_disjoint(&self, other: &IndexSet) -> bool {
        !self.intersects(other)
    }

    /// The smallest element.
    pub fn first(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .find(|(_, &w)| w != 0)
            .map(|(i, w)| i * BITS + w.trailing_zeros() as usize)
    }

    /// The largest element.
    pub fn last(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, &w)| w != 0)
            .map(|(i, w)| i * BITS + (BITS - 1 - w.leading_zeros() as usize))
    }

    /// The elements in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            words: &self.words,
            word: 0,
            bits: self.words.first().copied().unwrap_or(0),
        }
    }

    /// A copy over a universe of at least `universe`.
    fn widened(&self, universe: usize) -> IndexSet {
        let mut r = self.clone();
        if universe > r.universe {
            r.universe = universe;
            r.words.resize(universe.div_ceil(BITS), 0);
        }
        r
    }

    /// The words without trailing zero words: what equality and hashing look at.
    fn significant(&self) -> &[u64] {
        let n = self
            .words
            .iter()
            .rposition(|&w| w != 0)
            .map_or(0, |i| i + 1);
        &self.words[..n]
    }
}

/// Iterator over an [`IndexSet`]'s elements in ascending order.
pub struct Iter<'a> {
    words: &'a [u64],
    word: usize,
    bits: u64,
}

impl Iterator for Iter<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.bits == 0 {
            self.word += 1;
            self.bits = *self.words.get(self.word)?;
        }
        let t = self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(self.word * BITS + t)
    }
}

impl<'a> IntoIterator for &'a IndexSet {
    type Item = usize;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl PartialEq for IndexSet {
    fn eq(&self, other: &Self) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for IndexSet {}

impl Hash for IndexSet {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.significant().hash(state);
    }
}

impl Ord for IndexSet {
    fn cmp(&self, other: &Self) -> Ordering {
        self.iter().cmp(other.iter())
    }
}

impl PartialOrd for IndexSet {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for IndexSet {
    /// `{1,3,4}`; `{}` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (k, i) in self.iter().enumerate() {
            if k > 0 {
                f.write_str(",")?;
            }
            write!(f, "{i}")?;
        }
        f.write_str("}")
    }
}

impl fmt::Debug for IndexSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(universe: usize, xs: &[usize]) -> IndexSet {
        IndexSet::from_indices(universe, xs.iter().copied())
    }

    #[test]
    fn set_algebra() {
        let a = set(130, &[1, 3, 4, 64, 129]);
        let b = set(130, &[3, 5, 129]);
        assert_eq!(a.union(&b), set(130, &[1, 3, 4, 5, 64, 129]));
        assert_eq!(a.intersection(&b), set(130, &[3, 129]));
        assert_eq!(a.difference(&b), set(130, &[1, 4, 64]));
        assert!(a.intersects(&b) && !a.is_disjoint(&b));
        assert!(set(130, &[3, 129]).is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(IndexSet::new(130).is_subset(&b));
        assert_eq!(a.len(), 5);
        assert!(!a.is_empty() && IndexSet::new(7).is_empty());
    }

    #[test]
    fn membership_and_bounds() {
        let mut s = IndexSet::new(70);
        assert!(s.insert(69));
        assert!(!s.insert(69));
        assert!(s.contains(69) && !s.contains(68) && !s.contains(1000));
        assert!(s.remove(69) && !s.remove(69) && !s.remove(1000));
        assert_eq!(s.first(), None);
        assert_eq!(s.last(), None);
        let s = set(200, &[7, 64, 199]);
        assert_eq!(s.first(), Some(7));
        assert_eq!(s.last(), Some(199));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![7, 64, 199]);
        assert_eq!(IndexSet::full(3), set(3, &[0, 1, 2]));
        assert_eq!(IndexSet::singleton(3, 2), set(3, &[2]));
    }

    #[test]
    fn equality_ignores_universe() {
        let a = set(10, &[2, 3]);
        let b = set(300, &[2, 3]);
        assert_eq!(a, b);
        let mut h = std::collections::HashSet::new();
        h.insert(a.clone());
        assert!(h.contains(&b));
        let u = a.union(&set(300, &[299]));
        assert_eq!(u.universe(), 300);
        assert_eq!(u, set(300, &[2, 3, 299]));
    }

    #[test]
    fn order_is_by_first_element_then_lexicographic() {
        let mut v = [
            set(10, &[2]),
            set(10, &[1, 2]),
            set(10, &[1]),
            set(10, &[0, 5]),
            set(10, &[1, 3]),
        ];
        v.sort();
        let shown: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        assert_eq!(shown, ["{0,5}", "{1}", "{1,2}", "{1,3}", "{2}"]);
    }

    #[test]
    fn display() {
        assert_eq!(set(8, &[1, 3, 4]).to_string(), "{1,3,4}");
        assert_eq!(IndexSet::new(8).to_string(), "{}");
        assert_eq!(format!("{:?}", set(8, &[0])), "{0}");
    }
}
