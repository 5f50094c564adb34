//! How a value is kept in the store: the bytes it is written as and read back from.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::binary::BinaryError;

/// The form the store writes its records in. Either form is read, whatever the setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordForm {
    /// A compact binary form, for records that have one ([`Record::encode`]); others are JSON.
    #[default]
    Binary,
    /// JSON, as every version of the store has read. At open, records kept in the binary form
    /// are written again as JSON, so that a host that reads only JSON can take the file over.
    Json,
}

/// Why a record's bytes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// JSON that does not fit the record's type.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A binary record that is damaged.
    #[error("binary record: {0}")]
    Binary(#[from] BinaryError),
    /// A binary record in a form this host does not know (written by a newer one).
    #[error("binary record of form {0}, which this host does not know: it was written by a newer Steward")]
    UnknownForm(u8),
}

/// A value the store keeps. The defaults write and read JSON; a type with a binary form
/// overrides all three, and its [`Self::decode`] still reads the JSON of earlier versions.
pub trait Record: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// The bytes to keep for `self` when the store writes `form`.
    ///
    /// # Errors
    ///
    /// What serde_json says of a value it cannot write (a map with keys that are not text).
    fn encode(&self, form: RecordForm) -> Result<Vec<u8>, serde_json::Error> {
        let _ = form;
        serde_json::to_vec(self)
    }

    /// The value `bytes` hold, in either form.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for bytes that are not a record of this type.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The form `bytes` (a record this type wrote) are in.
    fn form_of(bytes: &[u8]) -> RecordForm {
        let _ = bytes;
        RecordForm::Json
    }
}

// Values the store's own tests keep.
#[cfg(test)]
impl Record for serde_json::Value {}

#[cfg(test)]
impl Record for u64 {}
