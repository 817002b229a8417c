//! Synthetic JSON events, the training corpus of the built-in dictionary.
//!
//! `cargo xtask train-dict` trains [`super::BUILTIN_DICTIONARY_BYTES`] on
//! `SampleEvents::new(TRAINING_SEED)`; benches and tests measure on other seeds so the
//! dictionary is never judged on the data it was trained on. The generator is deterministic
//! (a `SplitMix64` stream), so the corpus, and therefore the dictionary, is reproducible.
//!
//! The events look like what event-sourced web and application backends store: a JSON object
//! with an event name, ids, an epoch-millisecond timestamp and a handful of typed properties,
//! 150–600 bytes each.

use std::fmt::Write as _;

/// Seed of the dictionary's training corpus.
pub const TRAINING_SEED: u64 = 0x00ED_D1E5_0000_0001;

/// An endless, deterministic stream of JSON events (one `Vec<u8>` per event).
#[derive(Debug, Clone)]
pub struct SampleEvents {
    state: u64,
}

const EVENT_KINDS: [&str; 12] = [
    "page_view",
    "click",
    "form_submit",
    "add_to_cart",
    "checkout_started",
    "order_placed",
    "payment_captured",
    "user_signed_up",
    "user_logged_in",
    "search",
    "api_request",
    "error_raised",
];
const PATHS: [&str; 10] = [
    "/",
    "/home",
    "/products",
    "/products/detail",
    "/pricing",
    "/cart",
    "/checkout",
    "/account/settings",
    "/search",
    "/docs/getting-started",
];
const REFERRERS: [&str; 5] = [
    "https://www.google.com/",
    "https://news.ycombinator.com/",
    "https://duckduckgo.com/",
    "https://twitter.com/",
    "https://www.bing.com/",
];
const DEVICES: [&str; 3] = ["desktop", "mobile", "tablet"];
const BROWSERS: [&str; 5] = ["Chrome", "Firefox", "Safari", "Edge", "Opera"];
const COUNTRIES: [&str; 8] = ["US", "GB", "DE", "FR", "NL", "JP", "BR", "IN"];
const CURRENCIES: [&str; 4] = ["USD", "EUR", "GBP", "JPY"];
const SKUS: [&str; 6] = [
    "SKU-1001", "SKU-1002", "SKU-2040", "SKU-3300", "SKU-4512", "SKU-9000",
];
const METHODS: [&str; 4] = ["GET", "POST", "PUT", "DELETE"];
const ERRORS: [&str; 4] = [
    "TimeoutError",
    "ValidationError",
    "NotFound",
    "PermissionDenied",
];
const QUERIES: [&str; 6] = [
    "running shoes",
    "usb-c cable",
    "desk lamp",
    "coffee beans",
    "backpack",
    "headphones",
];

impl SampleEvents {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn event(&mut self) -> String {
        let kind = self.pick(&EVENT_KINDS);
        let user = self.next_u64() & 0xffff_ffff;
        let session = self.next_u64() & 0xffff_ffff_ffff;
        let timestamp = 1_715_600_000_000 + (self.next_u64() % 31_536_000_000);
        let mut s = String::with_capacity(512);
        let _ = write!(
            s,
            r#"{{"event_type":"{kind}","event_id":"{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}","user_id":"u_{user:08x}","session_id":"s_{session:012x}","timestamp":{timestamp},"#,
            self.next_u64() & 0xffff_ffff,
            self.next_u64() & 0xffff,
            self.next_u64() & 0xfff,
            self.next_u64() & 0xfff,
            self.next_u64() & 0xffff_ffff_ffff,
        );
        let path = self.pick(&PATHS);
        let _ = write!(s, r#""path":"{path}","#);
        if self.below(3) == 0 {
            s.push_str(r#""referrer":null,"#);
        } else {
            let referrer = self.pick(&REFERRERS);
            let _ = write!(s, r#""referrer":"{referrer}","#);
        }
        let device = self.pick(&DEVICES);
        let browser = self.pick(&BROWSERS);
        let major = 90 + self.below(40);
        let country = self.pick(&COUNTRIES);
        let _ = write!(
            s,
            r#""context":{{"device_type":"{device}","browser":"{browser}","browser_version":"{major}.0","country":"{country}","locale":"en-{country}"}},"properties":{{"#
        );
        self.properties(kind, &mut s);
        s.push_str("}}");
        s
    }

    fn properties(&mut self, kind: &str, s: &mut String) {
        match kind {
            "page_view" => {
                let load = 50 + self.below(2000);
                let _ = write!(
                    s,
                    r#""title":"{}","load_time_ms":{load},"screen_resolution":"1920x1080","viewport":"{}x{}""#,
                    self.pick(&["Home", "Products", "Pricing", "Docs", "Cart"]),
                    800 + self.below(1200),
                    600 + self.below(600),
                );
            }
            "click" => {
                let _ = write!(
                    s,
                    r#""element_id":"{}","element_type":"button","element_text":"{}","x":{},"y":{}"#,
                    self.pick(&[
                        "hero-cta",
                        "nav-login",
                        "plan-select-pro",
                        "add-to-cart",
                        "footer-contact"
                    ]),
                    self.pick(&[
                        "Get Started",
                        "Log in",
                        "Select Pro",
                        "Add to cart",
                        "Contact us"
                    ]),
                    self.below(1920),
                    self.below(1080),
                );
            }
            "add_to_cart" | "checkout_started" | "order_placed" | "payment_captured" => {
                self.order(s);
            }
            "user_signed_up" | "user_logged_in" => {
                let _ = write!(
                    s,
                    r#""method":"{}","email_domain":"{}","mfa":{},"plan":"{}""#,
                    self.pick(&["password", "google", "github", "sso"]),
                    self.pick(&["gmail.com", "example.com", "outlook.com", "corp.example"]),
                    self.below(2) == 0,
                    self.pick(&["free", "pro", "team", "enterprise"]),
                );
            }
            "search" => {
                let _ = write!(
                    s,
                    r#""query":"{}","results":{},"page":{},"filters":{{"in_stock":{},"sort":"{}"}}"#,
                    self.pick(&QUERIES),
                    self.below(500),
                    1 + self.below(5),
                    self.below(2) == 0,
                    self.pick(&["relevance", "price_asc", "price_desc", "newest"]),
                );
            }
            "api_request" => {
                let _ = write!(
                    s,
                    r#""method":"{}","route":"/api/v1/{}","status":{},"duration_ms":{},"bytes":{}"#,
                    self.pick(&METHODS),
                    self.pick(&["orders", "users", "carts", "products", "sessions"]),
                    self.pick(&["200", "201", "204", "400", "404", "500"]),
                    self.below(3000),
                    self.below(100_000),
                );
            }
            "error_raised" => {
                let _ = write!(
                    s,
                    r#""error":"{}","message":"request failed after {} retries","stack_depth":{},"fatal":{}"#,
                    self.pick(&ERRORS),
                    self.below(5),
                    self.below(40),
                    self.below(10) == 0,
                );
            }
            _ => {
                let _ = write!(
                    s,
                    r#""form_id":"{}","fields":["email","name","company"],"success":{},"duration_ms":{}"#,
                    self.pick(&["signup-form", "contact-form", "newsletter", "feedback"]),
                    self.below(5) != 0,
                    self.below(60_000),
                );
            }
        }
    }

    /// The properties of a commerce event: a basket of one to four items, its total and an
    /// order id.
    fn order(&mut self, s: &mut String) {
        let items = 1 + self.below(4);
        s.push_str(r#""items":["#);
        let mut total = 0usize;
        for i in 0..items {
            if i > 0 {
                s.push(',');
            }
            let price = 199 + self.below(20_000);
            let quantity = 1 + self.below(3);
            total += price * quantity;
            let _ = write!(
                s,
                r#"{{"sku":"{}","quantity":{quantity},"unit_price_cents":{price}}}"#,
                self.pick(&SKUS)
            );
        }
        let _ = write!(
            s,
            r#"],"total_cents":{total},"currency":"{}","order_id":"ord_{:010}""#,
            self.pick(&CURRENCIES),
            self.next_u64() % 10_000_000_000,
        );
    }
}

impl Iterator for SampleEvents {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        Some(self.event().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        let a: Vec<Vec<u8>> = SampleEvents::new(1).take(20).collect();
        let b: Vec<Vec<u8>> = SampleEvents::new(1).take(20).collect();
        let c: Vec<Vec<u8>> = SampleEvents::new(2).take(20).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn events_are_json_objects_of_plausible_size() {
        for event in SampleEvents::new(TRAINING_SEED).take(500) {
            assert!((150..=900).contains(&event.len()), "len {}", event.len());
            assert_eq!(event.first(), Some(&b'{'));
            assert_eq!(event.last(), Some(&b'}'));
            let text = std::str::from_utf8(&event).unwrap();
            let opens = text.matches('{').count();
            let closes = text.matches('}').count();
            assert_eq!(opens, closes, "{text}");
        }
    }
}
