//! Placeholder: the `local` medium is being built (issue 24); until then opening it is a
//! clear error.

use std::sync::Arc;

use super::{Media, MediaOptions};
use crate::error::{Error, Result};

pub(crate) fn open(_options: MediaOptions) -> Result<Arc<dyn Media>> {
    Err(Error::NotSupported { medium: "local", op: "open", why: "not built yet" })
}
