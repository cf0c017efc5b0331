//! Building blocks of the strategies other than `owner`.

pub mod gossip;
