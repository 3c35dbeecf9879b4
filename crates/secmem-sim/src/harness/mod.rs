//! Campaigns that test security claims instead of arguing them: crash injection with verified
//! recovery ([`crash`]), eADR power-loss drains with recovery ([`drain`]) and attack injection ([`attack`]), both in functional mode, both
//! generic over designs (they only use the `Design` hooks).

pub mod attack;
pub mod crash;
pub mod drain;
pub mod image;
mod replay;
pub mod vault_attack;

pub use attack::{attack_campaign, AttackOutcome, ClassOutcome};
pub use crash::{crash_campaign, CrashOutcome};
pub use drain::{drain_run, DrainContent, DrainOutcome, DrainScheme};
pub use image::{verify_image, ImageCheck};
pub use vault_attack::{vault_attack_campaign, VaultAttackOutcome};

/// Most injections per class or crash points a campaign takes: 10^7, hours of work already
/// (the campaigns use 500 and 2,000); more is a typo that would run for days.
pub const MAX_CAMPAIGN_COUNT: u64 = 10_000_000;

/// Most clean reads an attack campaign takes: 10^10, about an hour at the ~0.3 us a read
/// takes (the default is 10^6). 10^12 ran for days, where the injection counts were bounded.
pub const MAX_CLEAN_READS: u64 = 10_000_000_000;

/// Refuses a campaign of no injections or no crash points: it would report success
/// ("every injection detected") without testing anything; and one past
/// [`MAX_CAMPAIGN_COUNT`]. `flag` names the option.
fn require_some(count: u64, flag: &str, what: &str) -> Result<(), crate::run::SimError> {
    let fail = |m: String| Err(crate::run::SimError::Config(secmem_core::ConfigError::new("", m)));
    if count == 0 {
        return fail(format!("{flag} must be at least 1 (a campaign of no {what} shows nothing)"));
    }
    if count > MAX_CAMPAIGN_COUNT {
        return fail(format!("{flag} must be at most {MAX_CAMPAIGN_COUNT}, got {count}"));
    }
    Ok(())
}
