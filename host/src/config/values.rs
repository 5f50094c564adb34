//! The range-checked scalars the sections share: counts of connections, listen addresses, small positive numbers.

use std::net::SocketAddr;

use serde::Deserialize;

/// A count of connections or sessions: 1 to [`Count::MAX`].
#[derive(Debug)]
pub(super) struct Count(pub(super) usize);

impl Count {
    const MAX: u32 = 65_536;
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        if n == 0 || n > Self::MAX {
            return Err(serde::de::Error::custom(format!("{n} is out of range; use 1 to {}", Self::MAX)));
        }
        Ok(Count(n as usize))
    }
}

/// A socket address (`127.0.0.1:7878`), with an error that shows how to write one.
#[derive(Debug)]
pub(super) struct ListenAddr(pub(super) SocketAddr);

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map(ListenAddr).map_err(|_| {
            serde::de::Error::custom(format!("`{text}` is not an address:port; write for example 127.0.0.1:7878"))
        })
    }
}

/// A number of workers or attempts: 1 to 1024.
#[derive(Debug)]
pub(super) struct Positive(pub(super) u32);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        if n == 0 || n > 1024 {
            return Err(serde::de::Error::custom(format!("{n} is out of range; use 1 to 1024")));
        }
        Ok(Positive(n))
    }
}
