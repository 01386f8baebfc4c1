//! bincode 2 over serde: the one encoding of everything the store writes.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config())?;
    if used != bytes.len() {
        return Err(crate::error::Error::Decode(bincode::error::DecodeError::OtherString(
            format!("{} trailing bytes", bytes.len() - used),
        )));
    }
    Ok(value)
}
