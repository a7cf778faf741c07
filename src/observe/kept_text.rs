//! Text that request records repeat — endpoint names, model names, user agents — copied once for
//! the life of the process and borrowed by every record that holds it.
//!
//! A record is made on a serving thread and freed on the record writer's: each string it owns is
//! an allocation on one thread and a free into another thread's heap on the other, which the
//! allocator then has to collect back (~300 instructions a string, and cache lines both threads
//! write). A record's model names and user agent are nearly always the same few texts, so they
//! are kept instead.
//!
//! Memory stays bounded: past its cap a table copies each new text per record again, so no
//! stream of distinct names (endpoints renamed over and over, a client inventing model names)
//! grows it. Lookups stay cheap whatever the keys: a table of at most `most` entries cannot be
//! made to collide more than that.

use std::borrow::Cow;
use std::cell::RefCell;
use std::hash::BuildHasherDefault;

use crate::fasthash::FastSet;

/// The texts one table has kept.
pub struct KeptTexts {
    texts: FastSet<&'static str>,
    most: usize,
    /// The texts found last: a request's model names are usually those of the request before
    /// it (the model asked for, and the one the answer names), and comparing a few texts costs
    /// less than one lookup in the set.
    recent: [&'static str; RECENT],
    /// Where the next text found in the set goes in `recent`.
    next: usize,
}

const RECENT: usize = 4;

impl KeptTexts {
    pub const fn new(most: usize) -> Self {
        Self { texts: FastSet::with_hasher(BuildHasherDefault::new()), most, recent: [""; RECENT], next: 0 }
    }

    /// `text`, borrowed from the table (kept now if there is room), or copied past the cap.
    pub fn keep(&mut self, text: &str) -> Cow<'static, str> {
        if let Some(&recent) = self.recent.iter().find(|recent| **recent == text) {
            return Cow::Borrowed(recent);
        }
        if let Some(&kept) = self.texts.get(text) {
            self.found(kept);
            return Cow::Borrowed(kept);
        }
        if self.texts.len() >= self.most {
            return Cow::Owned(text.to_owned());
        }
        let kept: &'static str = Box::leak(text.to_owned().into_boxed_str());
        self.texts.insert(kept);
        self.found(kept);
        Cow::Borrowed(kept)
    }

    fn found(&mut self, kept: &'static str) {
        self.recent[self.next] = kept;
        self.next = (self.next + 1) % RECENT;
    }
}

/// How many texts each thread keeps for `kept_here`: with texts of at most
/// `trail::MAX_NAME` (256) bytes, at most 32 KiB per serving thread.
const MOST_PER_THREAD: usize = 128;

/// `text` as a record made on this thread holds it. Each serving thread has a table of its own:
/// no lock, and no cache line the other serving threads write.
pub fn kept_here(text: &str) -> Cow<'static, str> {
    thread_local! {
        static KEPT: RefCell<KeptTexts> = const { RefCell::new(KeptTexts::new(MOST_PER_THREAD)) };
    }
    KEPT.with_borrow_mut(|kept| kept.keep(text))
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_kept_once_and_borrowed_every_time_up_to_the_cap() {
        let most = RECENT + 2;
        let mut kept = KeptTexts::new(most);
        let same = |a: &Cow<'static, str>, b: &Cow<'static, str>| match (a, b) {
            (Cow::Borrowed(a), Cow::Borrowed(b)) => std::ptr::eq(*a, *b),
            other => panic!("not borrowed: {other:?}"),
        };
        let a = kept.keep("relay-a");
        // Among the recent texts.
        assert!(same(&a, &kept.keep(&String::from("relay-a"))), "one copy");
        // Found in the set once the recent texts have moved on.
        let others: Vec<String> = (0..RECENT).map(|i| format!("relay-{i}")).collect();
        for other in &others {
            assert!(matches!(kept.keep(other), Cow::Borrowed(o) if o == other));
        }
        assert!(!kept.recent.contains(&"relay-a"));
        assert!(same(&a, &kept.keep("relay-a")), "one copy");
        assert!(matches!(kept.keep("relay-z"), Cow::Borrowed("relay-z")));
        // Past the cap: copied each time, and the texts kept stay as they were.
        assert!(matches!(kept.keep("relay-past"), Cow::Owned(c) if c == "relay-past"));
        assert!(matches!(kept.keep("relay-past"), Cow::Owned(_)));
        assert_eq!(kept.texts.len(), most);
        assert!(same(&a, &kept.keep("relay-a")), "one copy");
    }

    #[test]
    fn each_thread_keeps_its_own_texts_and_no_more_than_its_cap() {
        let text = "claude-sonnet-4-5-this-thread";
        let (first, again) = (kept_here(text), kept_here(text));
        match (&first, &again) {
            (Cow::Borrowed(a), Cow::Borrowed(b)) => assert!(std::ptr::eq(*a, *b), "one copy per thread"),
            other => panic!("not borrowed: {other:?}"),
        }
        let (elsewhere, owned_past_cap) = std::thread::spawn(move || {
            let elsewhere = kept_here(text);
            let invented: Vec<_> = (0..MOST_PER_THREAD + 10).map(|i| kept_here(&format!("invented-{i}"))).collect();
            let owned = invented.iter().filter(|t| matches!(t, Cow::Owned(_))).count();
            (elsewhere, owned)
        })
        .join()
        .unwrap_or_else(|_| panic!("thread"));
        match (&first, &elsewhere) {
            (Cow::Borrowed(a), Cow::Borrowed(b)) => assert!(!std::ptr::eq(*a, *b), "another thread's table"),
            other => panic!("not borrowed: {other:?}"),
        }
        // The other thread had kept one text already, so all but its cap less one are copies.
        assert_eq!(owned_past_cap, 11);
    }
}
