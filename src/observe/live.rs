//! Live events for `GET /api/events` (SSE): request-completed summaries, breaker transitions,
//! configuration changes.
//!
//! A `tokio::sync::broadcast` channel: publishing writes into a fixed ring (one short lock, no
//! allocation beyond the event's `Arc`) and never waits for anyone; with no subscriber it is a
//! no-op. A subscriber that falls more than [`CAPACITY`] events behind finds, on its next read,
//! that it lagged: it gets one [`Delivery::Lagged`] and its subscription ends (the client is
//! told to reconnect and reload), because a dashboard that silently skipped events would show
//! wrong totals, and because the gateway must never buffer on behalf of a slow reader. A
//! subscriber that does not read at all costs nothing but its place in the ring.

use std::sync::Arc;

use futures_util::Stream;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

/// Events kept for slow subscribers before they are dropped.
pub const CAPACITY: usize = 1024;

/// One live event: its SSE event name and JSON payload.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveEvent {
    /// `request`, `breaker`, `config`.
    pub kind: &'static str,
    pub data: Value,
}

pub struct LiveBus {
    /// Events are shared, not copied, between subscribers.
    tx: broadcast::Sender<Arc<LiveEvent>>,
    /// `true` once the gateway is shutting down: every subscription ends, so that open SSE
    /// responses do not hold a graceful shutdown for its whole grace period.
    closed: watch::Sender<bool>,
}

impl Default for LiveBus {
    fn default() -> Self {
        Self::new()
    }
}

/// What a subscriber receives.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    Event(Arc<LiveEvent>),
    /// The subscriber fell behind and `missed` events were lost; the subscription ends here.
    Lagged {
        missed: u64,
    },
}

impl LiveBus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Self { tx, closed: watch::Sender::new(false) }
    }

    /// Publish to every subscriber; never blocks, never waits for a slow subscriber.
    pub fn publish(&self, event: LiveEvent) {
        // `send` fails only when there is no subscriber: nothing to do then.
        let _ = self.tx.send(Arc::new(event));
    }

    /// Whether anyone listens (lets a publisher skip building an event nobody will see).
    pub fn has_subscribers(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Receive every event published from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription { rx: self.tx.subscribe(), closed: self.closed.subscribe(), done: false }
    }

    /// End every subscription, present and future (at shutdown).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }
}

pub struct Subscription {
    rx: broadcast::Receiver<Arc<LiveEvent>>,
    closed: watch::Receiver<bool>,
    done: bool,
}

impl Subscription {
    /// The next delivery; `None` once the bus is closed, or after a `Lagged`.
    pub async fn next(&mut self) -> Option<Delivery> {
        if self.done {
            return None;
        }
        let delivery = tokio::select! {
            // Closing wins over pending events: at shutdown, ending promptly matters more.
            biased;
            _ = self.closed.wait_for(|closed| *closed) => None,
            received = self.rx.recv() => match received {
                Ok(event) => Some(Delivery::Event(event)),
                Err(broadcast::error::RecvError::Lagged(missed)) => Some(Delivery::Lagged { missed }),
                Err(broadcast::error::RecvError::Closed) => None,
            },
        };
        self.done = !matches!(delivery, Some(Delivery::Event(_)));
        delivery
    }

    pub fn into_stream(self) -> impl Stream<Item = Delivery> + Send + 'static {
        futures_util::stream::unfold(self, |mut sub| async move { sub.next().await.map(|d| (d, sub)) })
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use serde_json::json;

    use super::*;

    fn event(i: u64) -> LiveEvent {
        LiveEvent { kind: "request", data: json!({"i": i}) }
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_event_in_order() {
        let bus = LiveBus::new();
        let (mut a, mut b) = (bus.subscribe(), bus.subscribe());
        for i in 0..3 {
            bus.publish(event(i));
        }
        for sub in [&mut a, &mut b] {
            for i in 0..3 {
                assert_eq!(sub.next().await, Some(Delivery::Event(Arc::new(event(i)))));
            }
        }
    }

    #[tokio::test]
    async fn publishing_without_subscribers_is_a_no_op() {
        let bus = LiveBus::new();
        assert!(!bus.has_subscribers());
        for i in 0..(3 * CAPACITY as u64) {
            bus.publish(event(i));
        }
        // A late subscriber sees only what comes after it.
        let mut sub = bus.subscribe();
        assert!(bus.has_subscribers());
        bus.publish(event(7));
        assert_eq!(sub.next().await, Some(Delivery::Event(Arc::new(event(7)))));
        drop(sub);
        assert!(!bus.has_subscribers());
    }

    #[tokio::test]
    async fn a_lagging_subscriber_is_told_once_and_dropped_while_others_continue() {
        let bus = LiveBus::new();
        let slow = bus.subscribe();
        let mut keeping_up = bus.subscribe();
        let n = 5 * CAPACITY as u64;
        // The slow one never reads; publishing never waits for it.
        for i in 0..n {
            bus.publish(event(i));
            assert_eq!(keeping_up.next().await, Some(Delivery::Event(Arc::new(event(i)))));
        }
        let deliveries: Vec<Delivery> = slow.into_stream().collect().await;
        assert_eq!(deliveries, vec![Delivery::Lagged { missed: n - CAPACITY as u64 }]);
        // A fresh subscriber works.
        let mut fresh = bus.subscribe();
        bus.publish(event(n));
        assert_eq!(fresh.next().await, Some(Delivery::Event(Arc::new(event(n)))));
        assert_eq!(keeping_up.next().await, Some(Delivery::Event(Arc::new(event(n)))));
    }

    #[tokio::test]
    async fn close_ends_present_and_future_subscriptions() {
        let bus = LiveBus::new();
        let mut sub = bus.subscribe();
        let waiting = tokio::spawn(async move { sub.next().await });
        bus.close();
        assert_eq!(waiting.await.unwrap(), None);
        let mut late = bus.subscribe();
        bus.publish(event(1));
        assert_eq!(late.next().await, None);
    }
}
