//! Splitting the VPC's CIDR block into subnets, as CAPA's `SplitIntoSubnetsIPv4` does: the
//! next power of two of equal blocks, in address order. Hand-written: a dozen lines of
//! arithmetic do not warrant an IP-network crate in the component.

/// `count` equal blocks of an IPv4 `cidr` (`10.0.0.0/16`, 6 → eight /19s, the first 6).
pub fn split(cidr: &str, count: usize) -> Option<Vec<String>> {
    let (addr, len) = cidr.split_once('/')?;
    let len: u32 = len.parse().ok()?;
    let octets: Vec<u32> = addr
        .split('.')
        .map(|o| o.parse().ok())
        .collect::<Option<_>>()?;
    if octets.len() != 4 || octets.iter().any(|o| *o > 255) || len > 32 || count == 0 {
        return None;
    }
    let base = octets.iter().fold(0u32, |a, o| (a << 8) | o);
    let bits = (count as u32).next_power_of_two().trailing_zeros();
    let new_len = len + bits;
    if new_len > 28 {
        return None;
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    let base = base & mask;
    let size = 1u32 << (32 - new_len);
    Some(
        (0..count as u32)
            .map(|i| {
                let a = base + i * size;
                format!(
                    "{}.{}.{}.{}/{new_len}",
                    a >> 24,
                    (a >> 16) & 255,
                    (a >> 8) & 255,
                    a & 255
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn blocks_are_equal_and_in_order() {
        assert_eq!(
            split("10.0.0.0/16", 6).unwrap(),
            [
                "10.0.0.0/19",
                "10.0.32.0/19",
                "10.0.64.0/19",
                "10.0.96.0/19",
                "10.0.128.0/19",
                "10.0.160.0/19"
            ]
        );
        assert_eq!(
            split("10.1.0.0/16", 2).unwrap(),
            ["10.1.0.0/17", "10.1.128.0/17"]
        );
        assert_eq!(split("10.0.0.0/27", 4), None, "too small");
        assert_eq!(split("10.0.0/16", 2), None);
    }
}
