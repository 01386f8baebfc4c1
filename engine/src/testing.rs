//! Test carriers for the tests of crates above the engine (feature `test-util`): the
//! in-memory carrier and the fault-injecting one with its power-loss model, so that those
//! crates' code never names the carrier module (issue 24).

pub use crate::carrier::{
    CrashPlan, FaultRng, FaultyCarrier, InjectedError, MemoryCarrier, OpKind, OpRecord, PowerGroup,
    WriteHook,
};
