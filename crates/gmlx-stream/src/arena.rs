//! Which expert sits in which slot of a layer's arena, and which slot a missing expert takes:
//! the least popular one that the current step does not use. Popularity counts the steps that
//! used an expert, decaying by [`DECAY`] per step, so recent use weighs more than old use.
use std::collections::HashMap;

/// Popularity kept per step (`0.9`: an expert used ten steps ago counts about a third).
pub const DECAY: f32 = 0.9;

/// One step's placement: a slot for every needed expert, and the experts to read first.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `(expert, slot)` for every distinct needed expert, in the order asked.
    pub slots: Vec<(u32, usize)>,
    /// `(expert, slot)` for those not already in their slot: read them, then bind them.
    pub loads: Vec<(u32, usize)>,
}

/// Counters of one layer's arena.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Needed experts found in a slot.
    pub hits: u64,
    /// Needed experts read into a slot.
    pub misses: u64,
    /// Misses that replaced another expert.
    pub evictions: u64,
}

/// The slots of one layer.
#[derive(Debug, Clone)]
pub struct Arena {
    /// The expert in each slot.
    held: Vec<Option<u32>>,
    slot_of: HashMap<u32, usize>,
    popularity: Vec<f32>,
    stats: ArenaStats,
}

impl Arena {
    /// `slots` slots (at least one) for a layer of `experts` experts.
    pub fn new(slots: usize, experts: usize) -> Arena {
        Arena {
            held: vec![None; slots.max(1)],
            slot_of: HashMap::new(),
            popularity: vec![0.0; experts],
            stats: ArenaStats::default(),
        }
    }

    /// The layer's expert count.
    pub fn experts(&self) -> usize {
        self.popularity.len()
    }

    pub fn slots(&self) -> usize {
        self.held.len()
    }

    pub fn stats(&self) -> ArenaStats {
        self.stats
    }

    /// The expert in `slot`, if any.
    pub fn held(&self, slot: usize) -> Option<u32> {
        self.held.get(slot).copied().flatten()
    }

    /// Places the distinct experts of `needed` (ids below the layer's expert count), or
    /// `None` when they are more than the slots (the step then reads them outside the
    /// arena). Popularity decays and the needed experts gain one.
    pub fn plan(&mut self, needed: &[u32]) -> Option<Plan> {
        let mut distinct: Vec<u32> = Vec::with_capacity(needed.len());
        for &e in needed {
            if !distinct.contains(&e) {
                distinct.push(e);
            }
        }
        for p in &mut self.popularity {
            *p *= DECAY;
        }
        for &e in &distinct {
            if let Some(p) = self.popularity.get_mut(e as usize) {
                *p += 1.0;
            }
        }
        if distinct.len() > self.held.len() {
            return None;
        }
        let mut slots = Vec::with_capacity(distinct.len());
        let mut loads = Vec::new();
        let mut in_use = vec![false; self.held.len()];
        for &e in &distinct {
            if let Some(&s) = self.slot_of.get(&e) {
                in_use[s] = true;
            }
        }
        for &e in &distinct {
            if let Some(&s) = self.slot_of.get(&e) {
                self.stats.hits += 1;
                slots.push((e, s));
                continue;
            }
            let s = self.victim(&in_use);
            in_use[s] = true;
            if let Some(old) = self.held[s].take() {
                self.slot_of.remove(&old);
                self.stats.evictions += 1;
            }
            self.stats.misses += 1;
            slots.push((e, s));
            loads.push((e, s));
        }
        Some(Plan { slots, loads })
    }

    /// Empties every slot (each held expert counts as evicted).
    pub fn clear(&mut self) {
        for held in &mut self.held {
            if held.take().is_some() {
                self.stats.evictions += 1;
            }
        }
        self.slot_of.clear();
    }

    /// Records that `expert` is now bound in `slot` (its read succeeded).
    pub fn bind(&mut self, expert: u32, slot: usize) {
        if let Some(old) = self.held[slot].replace(expert) {
            self.slot_of.remove(&old);
        }
        self.slot_of.insert(expert, slot);
    }

    /// The slot to fill: an empty one, else the least popular expert's that this step does
    /// not use (ties: the lower slot).
    fn victim(&self, in_use: &[bool]) -> usize {
        let free = (0..self.held.len()).filter(|&s| !in_use[s]);
        let mut best: Option<(usize, f32)> = None;
        for s in free {
            let score = match self.held[s] {
                None => f32::NEG_INFINITY,
                Some(e) => self.popularity.get(e as usize).copied().unwrap_or(0.0),
            };
            if best.is_none_or(|(_, b)| score < b) {
                best = Some((s, score));
            }
        }
        // `plan` only asks when a slot is free of this step's experts
        best.map_or(0, |(s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind_all(arena: &mut Arena, plan: &Plan) {
        for &(e, s) in &plan.loads {
            arena.bind(e, s);
        }
    }

    #[test]
    fn hits_stay_and_misses_fill_empty_slots_first() {
        let mut a = Arena::new(3, 8);
        let p = a.plan(&[5, 2, 5]).expect("fits");
        assert_eq!(p.slots, vec![(5, 0), (2, 1)]);
        assert_eq!(p.loads, p.slots);
        bind_all(&mut a, &p);
        let p = a.plan(&[2, 7]).expect("fits");
        assert_eq!(p.slots, vec![(2, 1), (7, 2)]);
        assert_eq!(p.loads, vec![(7, 2)]);
        bind_all(&mut a, &p);
        assert_eq!(
            a.stats(),
            ArenaStats {
                hits: 1,
                misses: 3,
                evictions: 0
            }
        );
    }

    #[test]
    fn the_least_popular_unused_slot_is_evicted() {
        let mut a = Arena::new(3, 8);
        for step in [&[1, 2, 3][..], &[1, 2], &[1, 3], &[1, 2]] {
            let p = a.plan(step).expect("fits");
            bind_all(&mut a, &p);
        }
        // 3 is the least popular; 1 and 2 are used by this step anyway
        let p = a.plan(&[1, 6]).expect("fits");
        assert_eq!(p.loads.len(), 1);
        let (_, slot) = p.loads[0];
        assert_eq!(slot, 2, "expert 3's slot");
        bind_all(&mut a, &p);
        assert_eq!(a.held(2), Some(6));
        assert_eq!(a.stats().evictions, 1);
        // an expert of the current step is never evicted, however unpopular
        let p = a.plan(&[6, 1, 2]).expect("fits");
        assert!(p.loads.is_empty());
    }

    #[test]
    fn popularity_decays_so_recent_use_wins() {
        let mut a = Arena::new(3, 8);
        let run = |a: &mut Arena, step: &[u32], times: usize| {
            for _ in 0..times {
                let p = a.plan(step).expect("fits");
                bind_all(a, &p);
            }
        };
        run(&mut a, &[0], 10); // used often, long ago
        run(&mut a, &[4], 30);
        run(&mut a, &[1], 2); // used twice, just now
        let p = a.plan(&[4, 7]).expect("fits");
        assert_eq!(p.loads, vec![(7, 0)], "expert 0's slot, not expert 1's");
    }

    #[test]
    fn more_experts_than_slots_do_not_fit() {
        let mut a = Arena::new(2, 8);
        assert!(a.plan(&[1, 2, 3]).is_none());
        assert!(a.plan(&[1, 2]).is_some());
    }

    #[test]
    fn an_unbound_load_leaves_its_slot_empty() {
        let mut a = Arena::new(1, 4);
        let p = a.plan(&[1]).expect("fits");
        bind_all(&mut a, &p);
        let p = a.plan(&[2]).expect("fits");
        assert_eq!(p.loads, vec![(2, 0)]);
        // the read failed: not bound; the old expert is gone, the slot empty
        assert_eq!(a.held(0), None);
        let p = a.plan(&[1]).expect("fits");
        assert_eq!(p.loads, vec![(1, 0)], "read again");
    }
}
