//! What both openraft adapters share: waiting for a log callback from async code, and
//! turning a range of log indexes into a half-open `lo..hi`.

use std::ops::{Bound, RangeBounds};

use crate::error::{Error, Result};
use crate::log::Callback;

/// Waits for a core callback without blocking the async runtime.
pub(crate) async fn completed(start: impl FnOnce(Callback) -> Result<()>) -> Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    start(Box::new(move |r| {
        let _ = tx.send(r);
    }))?;
    match rx.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::shared(&e)),
        Err(_) => Err(Error::Closed),
    }
}

pub(crate) fn range_bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let lo = match range.start_bound() {
        Bound::Included(&x) => x,
        Bound::Excluded(&x) => x.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&x) => x.saturating_add(1),
        Bound::Excluded(&x) => x,
        Bound::Unbounded => u64::MAX,
    };
    (lo, hi)
}
