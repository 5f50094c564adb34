//! A host whose plugins come from a real registry: following a tag, keeping the last good, starting from the cache, signatures.
