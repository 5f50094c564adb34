//! The bench's build script: links a release binary as the host's is (text order, packed
//! relocations), since it runs the host as itself and its figures are the host's.

#[path = "../host/build/relr.rs"]
mod relr;
#[path = "../host/build/text_order.rs"]
mod text_order;

fn main() {
    text_order::link("../host/text-order.txt");
    relr::link();
}
