//! Campaigns that test security claims instead of arguing them: crash injection with verified
//! recovery ([`crash`]), eADR power-loss drains with recovery ([`drain`]) and attack injection ([`attack`]), both in functional mode, both
//! generic over designs (they only use the `Design` hooks).

pub mod attack;
pub mod crash;
pub mod drain;
pub mod image;
pub mod vault_attack;

pub use attack::{attack_campaign, AttackOutcome, ClassOutcome};
pub use crash::{crash_campaign, CrashOutcome};
pub use drain::{drain_run, DrainContent, DrainOutcome, DrainScheme};
pub use image::{verify_image, ImageCheck};
pub use vault_attack::{vault_attack_campaign, VaultAttackOutcome};
