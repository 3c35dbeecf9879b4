//! PCM DIMM timing: see the module docs (to be written).
