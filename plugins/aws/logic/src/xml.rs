//! AWS's answers as a small owned tree. EC2 lists are `…Set` elements of `<item>`s, Elastic
//! Load Balancing lists are elements of `<member>`s; [`Node::list`] reads both.

use capw_sdk::ProviderError;

/// An element: its local name, its text, its child elements.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    pub name: String,
    pub text: String,
    pub children: Vec<Node>,
}

impl Node {
    /// Parses an answer's body.
    pub fn parse(body: &str) -> Result<Node, ProviderError> {
        let doc = roxmltree::Document::parse(body).map_err(|e| {
            ProviderError::Other(format!("AWS answered with XML that does not parse: {e}"))
        })?;
        Ok(Self::from(doc.root_element()))
    }

    fn from(n: roxmltree::Node<'_, '_>) -> Node {
        Node {
            name: n.tag_name().name().to_string(),
            text: n
                .children()
                .filter(|c| c.is_text())
                .filter_map(|c| c.text())
                .collect::<String>()
                .trim()
                .to_string(),
            children: n
                .children()
                .filter(|c| c.is_element())
                .map(Node::from)
                .collect(),
        }
    }

    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The first element named `name` anywhere below, depth first.
    pub fn find(&self, name: &str) -> Option<&Node> {
        self.children.iter().find_map(|c| {
            if c.name == name {
                Some(c)
            } else {
                c.find(name)
            }
        })
    }

    /// The text of the child at a `/`-separated path (`instanceState/name`); empty if absent.
    pub fn text(&self, path: &str) -> &str {
        let mut cur = self;
        for part in path.split('/') {
            match cur.child(part) {
                Some(c) => cur = c,
                None => return "",
            }
        }
        &cur.text
    }

    /// The entries of the list `name` found anywhere below (`vpcSet`, `LoadBalancers`).
    pub fn list(&self, name: &str) -> Vec<&Node> {
        self.find(name)
            .map(|l| {
                l.children
                    .iter()
                    .filter(|c| c.name == "item" || c.name == "member")
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A resource's tags (`tagSet` of `key`/`value`, or `Tags` of `Key`/`Value`).
    pub fn tag(&self, key: &str) -> Option<&str> {
        let ec2 = self.child("tagSet").map(|t| (t, "key", "value"));
        let elb = self.child("Tags").map(|t| (t, "Key", "Value"));
        let (set, k, v) = ec2.or(elb)?;
        set.children
            .iter()
            .find(|t| t.text(k) == key)
            .map(|t| t.text(v))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn both_list_styles_and_tags_read_alike() {
        let ec2 = Node::parse(r#"<DescribeVpcsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId><vpcSet><item><vpcId>vpc-1</vpcId><tagSet><item><key>Name</key><value>c-vpc</value></item></tagSet></item></vpcSet></DescribeVpcsResponse>"#).unwrap();
        let vpcs = ec2.list("vpcSet");
        assert_eq!(vpcs.len(), 1);
        assert_eq!(vpcs[0].text("vpcId"), "vpc-1");
        assert_eq!(vpcs[0].tag("Name"), Some("c-vpc"));
        let elb = Node::parse(r#"<DescribeLoadBalancersResponse><DescribeLoadBalancersResult><LoadBalancers><member><DNSName>x.elb.amazonaws.com</DNSName><State><Code>active</Code></State></member></LoadBalancers></DescribeLoadBalancersResult></DescribeLoadBalancersResponse>"#).unwrap();
        let lbs = elb.list("LoadBalancers");
        assert_eq!(lbs[0].text("State/Code"), "active");
        assert_eq!(lbs[0].text("DNSName"), "x.elb.amazonaws.com");
        assert!(elb.list("Nothing").is_empty());
        assert!(Node::parse("<unclosed>").is_err());
    }
}
