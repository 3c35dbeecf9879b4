//! Campaigns that test security claims instead of arguing them: crash injection with verified
//! recovery ([`crash`]) and attack injection ([`attack`]), both in functional mode, both
//! generic over designs (they only use the `Design` hooks).

pub mod attack;
pub mod crash;
pub mod image;

pub use attack::{attack_campaign, AttackOutcome, ClassOutcome};
pub use crash::{crash_campaign, CrashOutcome};
pub use image::{verify_image, ImageCheck};
