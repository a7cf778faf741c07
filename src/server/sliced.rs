//! An answer's body handed to hyper in slices, so that one connection's write buffer keeps its
//! first size.
//!
//! The server writes through one flat buffer per connection (`writev(false)` in `server.rs`):
//! hyper copies the head and the body's frames into it and writes them with one `write`. Under
//! load that costs less than hyper's queue of buffers written with `writev` (BENCHMARKS.md),
//! but the buffer grows to whatever is put in it before a flush and keeps that capacity for as
//! long as the connection lives: a 60 MiB answer would leave 60 MiB behind on a kept-alive
//! connection, and hyper goes on buffering the frames a body has ready up to its 64 KiB limit.
//! `Sliced` bounds what goes in between two flushes: no frame larger than [`WRITE_SLICE`]
//! (a larger one is split, without copying), and once a slice's worth has gone out with no
//! pause from the body, one pause — `Pending`, with the task woken at once — on which hyper
//! writes what it holds before asking for more. Between two flushes hyper then holds less than
//! two slices and the head: within its first 8 KiB for a head under 2 KiB, so the buffer does
//! not grow for an answer of any size.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The most body bytes hyper is given between two of its writes, as one frame or several.
pub const WRITE_SLICE: usize = 3 * 1024;

pub struct Sliced<B> {
    body: B,
    /// What is left of a frame larger than `WRITE_SLICE`.
    rest: Bytes,
    /// Bytes handed over since the body last paused.
    since_pause: usize,
}

impl<B> Sliced<B> {
    pub fn new(body: B) -> Self {
        Sliced { body, rest: Bytes::new(), since_pause: 0 }
    }

    fn hand_over(&mut self, data: Bytes) -> Poll<Option<Result<Frame<Bytes>, B::Error>>>
    where
        B: Body,
    {
        self.since_pause += data.len();
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    /// The next slice of `rest`.
    fn next_slice(&mut self) -> Bytes {
        let n = self.rest.len().min(WRITE_SLICE);
        self.rest.split_to(n)
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Sliced<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if this.since_pause >= WRITE_SLICE {
            this.since_pause = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if !this.rest.is_empty() {
            let slice = this.next_slice();
            return this.hand_over(slice);
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Pending => {
                // hyper writes what it holds whenever the body pauses.
                this.since_pause = 0;
                Poll::Pending
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if data.len() > WRITE_SLICE => {
                    this.rest = data;
                    let slice = this.next_slice();
                    this.hand_over(slice)
                }
                Ok(data) => this.hand_over(data),
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::convert::Infallible;

    use crate::test_waker::counting_waker;

    /// A body whose polls answer from a script: a frame, or `None` for one `Pending`.
    struct Scripted {
        script: VecDeque<Option<Bytes>>,
    }

    impl Scripted {
        fn new(script: impl IntoIterator<Item = Option<Vec<u8>>>) -> Self {
            Scripted { script: script.into_iter().map(|s| s.map(Bytes::from)).collect() }
        }
    }

    impl Body for Scripted {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.script.pop_front() {
                None => Poll::Ready(None),
                Some(None) => Poll::Pending,
                Some(Some(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
            }
        }

        fn is_end_stream(&self) -> bool {
            self.script.is_empty()
        }

        fn size_hint(&self) -> SizeHint {
            let n: usize = self.script.iter().flatten().map(Bytes::len).sum();
            SizeHint::with_exact(n as u64)
        }
    }

    /// Every poll of `body` until its end: `Some(len)` for a frame, `None` for a `Pending`.
    fn polls(body: &mut Sliced<Scripted>) -> (Vec<Option<usize>>, Vec<u8>, usize) {
        let (wakes, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let (mut seen, mut bytes) = (Vec::new(), Vec::new());
        for _ in 0..1000 {
            match Pin::new(&mut *body).poll_frame(&mut cx) {
                Poll::Pending => seen.push(None),
                Poll::Ready(Some(frame)) => {
                    let data = frame.unwrap().into_data().unwrap();
                    seen.push(Some(data.len()));
                    bytes.extend_from_slice(&data);
                }
                Poll::Ready(None) => return (seen, bytes, wakes.count()),
            }
        }
        panic!("the body never ended: {seen:?}");
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_large_frame_goes_out_in_slices_with_a_pause_after_each() {
        let whole = pattern(2 * WRITE_SLICE + 100);
        let mut body = Sliced::new(Scripted::new([Some(whole.clone())]));
        assert_eq!(body.size_hint().exact(), Some(whole.len() as u64));
        let (seen, bytes, wakes) = polls(&mut body);
        assert_eq!(seen, [Some(WRITE_SLICE), None, Some(WRITE_SLICE), None, Some(100)]);
        assert_eq!(bytes, whole, "the slices are the frame, in order");
        assert_eq!(wakes, 2, "every pause of its own wakes the task, or the answer would hang");
    }

    #[test]
    fn the_rest_of_a_frame_is_counted_until_it_is_sent() {
        let mut body = Sliced::new(Scripted::new([Some(pattern(WRITE_SLICE + 1))]));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(matches!(Pin::new(&mut body).poll_frame(&mut cx), Poll::Ready(Some(_))));
        assert!(!body.is_end_stream(), "a byte is still held");
        assert_eq!(body.size_hint().exact(), Some(1));
    }

    #[test]
    fn small_frames_pass_whole_and_pause_once_a_slice_has_gone_out() {
        let third = WRITE_SLICE / 3;
        let frames = [third, third, third, third, 10];
        let mut body = Sliced::new(Scripted::new(frames.map(|n| Some(pattern(n)))));
        let (seen, bytes, wakes) = polls(&mut body);
        assert_eq!(seen, [Some(third), Some(third), Some(third), None, Some(third), Some(10)]);
        assert_eq!(bytes.len(), frames.iter().sum::<usize>());
        assert_eq!(wakes, 1);
    }

    #[test]
    fn a_pause_of_the_body_starts_the_count_again_and_wakes_nothing() {
        // A stream's events, each after a pause of the upstream: none is held back.
        let half = WRITE_SLICE / 2 + 1;
        let script = [Some(pattern(half)), None, Some(pattern(half)), None, Some(pattern(half))];
        let mut body = Sliced::new(Scripted::new(script));
        let (seen, _, wakes) = polls(&mut body);
        assert_eq!(seen, [Some(half), None, Some(half), None, Some(half)]);
        assert_eq!(wakes, 0, "the body's own pauses are its waker's business");
    }

    #[test]
    fn a_frame_of_exactly_a_slice_is_not_split() {
        let mut body = Sliced::new(Scripted::new([Some(pattern(WRITE_SLICE)), Some(pattern(1))]));
        let (seen, _, _) = polls(&mut body);
        assert_eq!(seen, [Some(WRITE_SLICE), None, Some(1)]);
    }
}
