//! [`Tasks`]: tasks whose first failure is their owner's, and which end
//! with it: dropping a `Tasks` aborts them all, so when the service stops,
//! every connection it serves stops too.

use std::future::{Future, pending};
use std::panic::resume_unwind;

use tokio::task::JoinSet;

use crate::error::CaptureError;

/// A set of running tasks.
#[derive(Default)]
pub(crate) struct Tasks {
    set: JoinSet<Result<(), CaptureError>>,
}

impl Tasks {
    pub(crate) fn spawn(
        &mut self,
        task: impl Future<Output = Result<(), CaptureError>> + Send + 'static,
    ) {
        self.set.spawn(task);
    }

    /// Once every task has ended: the first error one returned (a panic is
    /// passed on), else `Ok`.
    pub(crate) async fn finished(mut self) -> Result<(), CaptureError> {
        loop {
            match self.set.join_next().await {
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(error))) => return Err(error),
                Some(Err(join)) if join.is_panic() => resume_unwind(join.into_panic()),
                Some(Err(_cancelled)) => {}
                None => return Ok(()),
            }
        }
    }

    /// The first error a task returns (a panic is passed on); pending
    /// while none has, also when none runs. Cancel-safe, for `select!`.
    pub(crate) async fn failed(&mut self) -> CaptureError {
        loop {
            match self.set.join_next().await {
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(error))) => return error,
                Some(Err(join)) if join.is_panic() => resume_unwind(join.into_panic()),
                Some(Err(_cancelled)) => {}
                None => pending().await,
            }
        }
    }
}
