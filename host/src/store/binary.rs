//! The primitives of the store's binary record form: LEB128 integers and length-prefixed text.
//!
//! [`Writer`] appends to a byte vector and cannot fail; [`Reader`] takes the same items back in
//! the same order and fails, naming the byte offset, on bytes that are cut short, an integer
//! longer than its type, text that is not UTF-8, or an option or flag byte other than 0 and 1.

use std::fmt;

/// Appends the items of a binary record to a byte vector.
pub struct Writer {
    out: Vec<u8>,
}

impl Writer {
    /// A writer whose vector has room for `capacity` bytes before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { out: Vec::with_capacity(capacity) }
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }

    /// One byte as it is.
    pub fn byte(&mut self, b: u8) {
        self.out.push(b);
    }

    /// An unsigned integer in LEB128: seven bits a byte, low bits first, one to ten bytes.
    pub fn uint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.out.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.out.push(n as u8);
    }

    /// Eight bytes, little-endian: for values spread over the whole range (hashes).
    pub fn fixed(&mut self, n: u64) {
        self.out.extend_from_slice(&n.to_le_bytes());
    }

    /// A flag: 1 or 0.
    pub fn flag(&mut self, b: bool) {
        self.out.push(u8::from(b));
    }

    /// Text: its length in bytes ([`Self::uint`]), then its UTF-8.
    pub fn text(&mut self, s: &str) {
        self.uint(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }

    /// An optional integer: 0 for none, else 1 and the integer.
    pub fn opt_uint(&mut self, n: Option<u64>) {
        self.opt(n, Self::uint);
    }

    /// Optional text: 0 for none, else 1 and the text.
    pub fn opt_text(&mut self, s: Option<&str>) {
        self.opt(s, Self::text);
    }

    /// An optional item: 0 for none, else 1 and what `put` writes.
    pub fn opt<T>(&mut self, v: Option<T>, put: impl FnOnce(&mut Self, T)) {
        match v {
            None => self.out.push(0),
            Some(v) => {
                self.out.push(1);
                put(self, v);
            }
        }
    }

    /// A sequence: its length ([`Self::uint`]), then each item as `put` writes it.
    pub fn seq<'a, T: 'a>(
        &mut self,
        items: impl ExactSizeIterator<Item = &'a T>,
        mut put: impl FnMut(&mut Self, &'a T),
    ) {
        self.uint(items.len() as u64);
        for item in items {
            put(self, item);
        }
    }
}

/// Why a binary record could not be read, and at which byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryError {
    /// The offset of the item that could not be read.
    pub at: usize,
    /// What was wrong with it.
    pub what: &'static str,
}

impl fmt::Display for BinaryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for BinaryError {}

/// Takes the items of a binary record back, in the order [`Writer`] wrote them.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn fail<T>(&self, what: &'static str) -> Result<T, BinaryError> {
        Err(BinaryError { at: self.at, what })
    }

    /// Succeeds only if every byte was read.
    pub fn finish(self) -> Result<(), BinaryError> {
        if self.at == self.bytes.len() { Ok(()) } else { self.fail("bytes left after the record") }
    }

    /// One byte.
    pub fn byte(&mut self) -> Result<u8, BinaryError> {
        match self.bytes.get(self.at) {
            Some(&b) => {
                self.at += 1;
                Ok(b)
            }
            None => self.fail("record cut short"),
        }
    }

    /// A byte [`Writer::byte`] wrote, as the value `of` maps it to; a byte `of` maps to
    /// nothing is an error.
    pub fn one_of<T>(&mut self, of: impl FnOnce(u8) -> Option<T>) -> Result<T, BinaryError> {
        let b = self.byte()?;
        match of(b) {
            Some(v) => Ok(v),
            None => {
                self.at -= 1;
                self.fail("unknown value of an enumeration")
            }
        }
    }

    /// An integer [`Writer::uint`] wrote.
    pub fn uint(&mut self) -> Result<u64, BinaryError> {
        let start = self.at;
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            // The tenth byte holds the top bit only.
            if shift == 63 && bits > 1 {
                self.at = start;
                return self.fail("integer larger than 64 bits");
            }
            n |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        self.at = start;
        self.fail("integer larger than 64 bits")
    }

    /// An integer [`Writer::uint`] wrote, that must fit in 32 bits.
    pub fn uint32(&mut self) -> Result<u32, BinaryError> {
        let start = self.at;
        let n = self.uint()?;
        u32::try_from(n).or_else(|_| {
            self.at = start;
            self.fail("integer larger than 32 bits")
        })
    }

    /// Eight bytes [`Writer::fixed`] wrote.
    pub fn fixed(&mut self) -> Result<u64, BinaryError> {
        match self.bytes.get(self.at..self.at + 8) {
            Some(b) => {
                self.at += 8;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Ok(u64::from_le_bytes(a))
            }
            None => self.fail("record cut short"),
        }
    }

    /// A flag [`Writer::flag`] wrote.
    pub fn flag(&mut self) -> Result<bool, BinaryError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => {
                self.at -= 1;
                self.fail("flag neither 0 nor 1")
            }
        }
    }

    /// Text [`Writer::text`] wrote, borrowed from the record.
    pub fn text(&mut self) -> Result<&'a str, BinaryError> {
        let start = self.at;
        let len = self.uint()?;
        let end = usize::try_from(len).ok().and_then(|len| self.at.checked_add(len));
        match end.and_then(|end| self.bytes.get(self.at..end)) {
            Some(b) => match std::str::from_utf8(b) {
                Ok(s) => {
                    self.at += b.len();
                    Ok(s)
                }
                Err(_) => {
                    self.at = start;
                    self.fail("text that is not UTF-8")
                }
            },
            None => {
                self.at = start;
                self.fail("text cut short")
            }
        }
    }

    /// An optional integer [`Writer::opt_uint`] wrote.
    pub fn opt_uint(&mut self) -> Result<Option<u64>, BinaryError> {
        self.opt(Self::uint)
    }

    /// An optional item [`Writer::opt`] wrote, read with `take`.
    pub fn opt<T>(&mut self, take: impl FnOnce(&mut Self) -> Result<T, BinaryError>) -> Result<Option<T>, BinaryError> {
        if self.flag()? { take(self).map(Some) } else { Ok(None) }
    }

    /// The length of a sequence [`Writer::seq`] wrote. A length larger than the bytes left
    /// (every item takes at least one) is refused, so that a damaged length cannot make the
    /// caller reserve room for it.
    pub fn seq_len(&mut self) -> Result<usize, BinaryError> {
        let start = self.at;
        let n = self.uint()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.bytes.len() - self.at => Ok(n),
            _ => {
                self.at = start;
                self.fail("sequence longer than the record")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_reads_back_as_written() {
        let mut w = Writer::with_capacity(0);
        for n in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            w.uint(n);
        }
        w.fixed(0x0123_4567_89ab_cdef);
        w.flag(true);
        w.flag(false);
        w.text("");
        w.text("grüße, 世界");
        w.opt_uint(None);
        w.opt_uint(Some(7));
        w.opt_text(Some("x"));
        w.opt_text(None);
        w.seq(["a", "bc"].iter(), |w, s| w.text(s));
        w.byte(9);
        let bytes = w.into_bytes();

        let mut r = Reader::new(&bytes);
        for n in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(r.uint().unwrap(), n);
        }
        assert_eq!(r.fixed().unwrap(), 0x0123_4567_89ab_cdef);
        assert!(r.flag().unwrap());
        assert!(!r.flag().unwrap());
        assert_eq!(r.text().unwrap(), "");
        assert_eq!(r.text().unwrap(), "grüße, 世界");
        assert_eq!(r.opt_uint().unwrap(), None);
        assert_eq!(r.opt_uint().unwrap(), Some(7));
        assert_eq!(r.opt(Reader::text).unwrap(), Some("x"));
        assert_eq!(r.opt(Reader::text).unwrap(), None);
        let n = r.seq_len().unwrap();
        let items: Vec<&str> = (0..n).map(|_| r.text().unwrap()).collect();
        assert_eq!(items, ["a", "bc"]);
        assert_eq!(r.byte().unwrap(), 9);
        r.finish().unwrap();
    }

    #[test]
    fn small_integers_take_one_byte_and_the_largest_ten() {
        let len = |n| {
            let mut w = Writer::with_capacity(0);
            w.uint(n);
            w.into_bytes().len()
        };
        assert_eq!((len(0), len(127), len(128), len(u64::MAX)), (1, 1, 2, 10));
    }

    #[test]
    fn damaged_bytes_are_errors_that_say_where() {
        // Cut short: every prefix of a record fails, none panics.
        let mut w = Writer::with_capacity(0);
        w.uint(300);
        w.text("hello");
        w.fixed(1);
        let bytes = w.into_bytes();
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let read = r.uint().and_then(|_| r.text().map(drop)).and_then(|()| r.fixed().map(drop));
            assert!(read.is_err(), "a record cut at {cut} read");
        }

        let err = |bytes: &[u8], take: fn(&mut Reader<'_>) -> Result<(), BinaryError>| {
            let mut r = Reader::new(bytes);
            take(&mut r).unwrap_err()
        };
        assert_eq!(
            err(&[0xff; 11], |r| r.uint().map(drop)),
            BinaryError { at: 0, what: "integer larger than 64 bits" }
        );
        // Ten bytes whose last holds more than the 64th bit.
        let mut too_big = [0xff; 10];
        too_big[9] = 0x02;
        assert_eq!(err(&too_big, |r| r.uint().map(drop)).what, "integer larger than 64 bits");
        assert_eq!(err(&[0x80, 0x80, 0x80, 0x80, 0x10], |r| r.uint32().map(drop)).what, "integer larger than 32 bits");
        assert_eq!(
            err(&[1, 2], |r| r.byte().and_then(|_| r.flag()).map(drop)),
            BinaryError { at: 1, what: "flag neither 0 nor 1" }
        );
        assert_eq!(
            err(&[7, 7], |r| r.byte().and_then(|_| r.one_of(|b| (b < 2).then_some(b))).map(drop)),
            BinaryError { at: 1, what: "unknown value of an enumeration" }
        );
        assert_eq!(err(&[2, 0xc3, 0x28], |r| r.text().map(drop)).what, "text that is not UTF-8");
        assert_eq!(err(&[5, b'a'], |r| r.text().map(drop)).what, "text cut short");
        assert_eq!(
            err(&[0xff, 0xff, 0xff, 0xff, 0x0f], |r| r.seq_len().map(drop)).what,
            "sequence longer than the record"
        );
        let mut r = Reader::new(&[0, 0]);
        r.byte().unwrap();
        assert_eq!(r.finish().unwrap_err(), BinaryError { at: 1, what: "bytes left after the record" });
        assert_eq!(BinaryError { at: 3, what: "record cut short" }.to_string(), "record cut short at byte 3");
    }
}
