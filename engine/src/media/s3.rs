//! Placeholder: the `s3` medium is being built (issue 24); until then opening it is a
//! clear error.

use std::sync::Arc;

use super::{Media, MediaOptions};
use crate::error::{Error, Result};

pub(crate) fn open(_url: &super::S3Url, _options: MediaOptions) -> Result<Arc<dyn Media>> {
    Err(Error::NotSupported { medium: "s3", op: "open", why: "not built yet" })
}
