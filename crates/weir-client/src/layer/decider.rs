//! What the layer asks: any weir-core [`Decide`] (this process's limiter, an embedded node's engine, a remote node's client), held behind one object-safe face.

use futures::future::BoxFuture;
use weir_core::{CheckError, CheckRequest, CheckResponse, Decide, Nanos};

/// [`Decide`] with its future boxed, so one layer type serves every decider.
pub(crate) trait Erased: Send + Sync + 'static {
    fn decide<'a>(
        &'a self,
        req: &'a CheckRequest,
    ) -> BoxFuture<'a, Result<CheckResponse, CheckError>>;
    fn now(&self) -> Nanos;
}

impl<D: Decide> Erased for D {
    fn decide<'a>(
        &'a self,
        req: &'a CheckRequest,
    ) -> BoxFuture<'a, Result<CheckResponse, CheckError>> {
        Box::pin(Decide::decide(self, req))
    }

    fn now(&self) -> Nanos {
        Decide::now(self)
    }
}
