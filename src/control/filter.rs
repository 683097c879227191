//! Which volumes `GET /v1/stats` and `GET /metrics` cover. At thousands of volumes a
//! scraper or an operator wants some of them, so both take a query string:
//!
//! | key | meaning |
//! |---|---|
//! | `volume=NAME` | only that volume |
//! | `group=NAME` | the volumes directly in that group (`root`: the top level) |
//! | `active=true` | only volumes active in the QoS tree (they issued I/O lately); `false`: only idle ones |
//! | `offset=N`, `limit=N` | a page of what the keys above select, in the order volumes were created |
//!
//! Device-wide figures are always there; `volumes_total` in `/v1/stats` counts what the
//! keys select before `offset` and `limit`.

use super::error::ApiError;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeFilter {
    pub volume: Option<String>,
    pub group: Option<String>,
    pub active: Option<bool>,
    pub offset: usize,
    pub limit: Option<usize>,
}

impl VolumeFilter {
    /// Parses a query string (`None`: everything). Unknown keys and bad values are 400s
    /// naming the key.
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let mut f = VolumeFilter::default();
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if seen.contains(&key) {
                return Err(ApiError::field(key, "given twice"));
            }
            seen.push(key);
            if value.contains('%') || value.contains('+') {
                // Names and numbers never need encoding: refuse rather than match nothing.
                return Err(ApiError::field(
                    key,
                    format!("{value:?}: names are plain (A-Z a-z 0-9 . _ -)"),
                ));
            }
            let number = |what: &str| {
                value.parse::<usize>().map_err(|_| {
                    ApiError::field(key, format!("{what}: expected a number, got {value:?}"))
                })
            };
            match key {
                "volume" => f.volume = Some(value.to_owned()),
                "group" => f.group = Some(value.to_owned()),
                "active" => {
                    f.active = Some(match value {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        _ => {
                            return Err(ApiError::field(
                                key,
                                format!("expected true or false, got {value:?}"),
                            ))
                        }
                    })
                }
                "offset" => f.offset = number("volumes to skip")?,
                "limit" => f.limit = Some(number("volumes to return at most")?),
                _ => {
                    return Err(ApiError::field(
                        key,
                        "unknown query key; expected volume, group, active, offset or limit",
                    ))
                }
            }
        }
        Ok(f)
    }

    /// Does a volume named `name`, in `group`, active or not, pass the keys (before the
    /// page)?
    pub fn matches(&self, name: &str, group: &str, active: bool) -> bool {
        self.volume.as_deref().map_or(true, |v| v == name)
            && self.group.as_deref().map_or(true, |g| g == group)
            && self.active.map_or(true, |a| a == active)
    }

    /// The page of `selected` (what [`VolumeFilter::matches`] let through), and how many
    /// there were.
    pub fn page<T>(&self, selected: Vec<T>) -> (Vec<T>, usize) {
        let total = selected.len();
        let page = selected
            .into_iter()
            .skip(self.offset)
            .take(self.limit.unwrap_or(usize::MAX))
            .collect();
        (page, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_errors_name_the_key() {
        let f = VolumeFilter::parse(Some("group=tenant-a&active=true&offset=10&limit=5")).unwrap();
        assert_eq!(f.group.as_deref(), Some("tenant-a"));
        assert_eq!((f.active, f.offset, f.limit), (Some(true), 10, Some(5)));
        assert_eq!(VolumeFilter::parse(None).unwrap(), VolumeFilter::default());
        assert_eq!(
            VolumeFilter::parse(Some("")).unwrap(),
            VolumeFilter::default()
        );
        for (query, key) in [
            ("limit=ten", "limit"),
            ("offset=-1", "offset"),
            ("active=yes", "active"),
            ("groups=a", "groups"),
            ("volume=a&volume=b", "volume"),
            ("volume=v%2D1", "volume"),
        ] {
            let e = VolumeFilter::parse(Some(query)).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(key), "{query}");
        }
    }

    #[test]
    fn matches_and_pages() {
        let f = VolumeFilter::parse(Some("group=g&active=true")).unwrap();
        assert!(f.matches("a", "g", true));
        assert!(!f.matches("a", "g", false));
        assert!(!f.matches("a", "root", true));
        let f = VolumeFilter::parse(Some("volume=b")).unwrap();
        assert!(f.matches("b", "root", false) && !f.matches("a", "root", false));
        let f = VolumeFilter::parse(Some("offset=1&limit=2")).unwrap();
        assert_eq!(f.page(vec![1, 2, 3, 4]), (vec![2, 3], 4));
        assert_eq!(f.page(vec![1]), (vec![], 1));
    }
}
