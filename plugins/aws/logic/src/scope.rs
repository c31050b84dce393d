//! What one reconcile of an AWSCluster or AWSMachine works with: the region's client, the
//! cluster's name (every tag carries it), the object, and the conditions it reports.

use crate::client::Client;
use crate::tags;
use capw_sdk::{Condition, View, condition};

pub struct Scope {
    pub api: Client,
    /// The Cluster's name, as CAPA's tags carry it.
    pub cluster: String,
    /// The AWSCluster (for machines: the AWSCluster of their Cluster).
    pub obj: View,
    pub conditions: Vec<Condition>,
}

impl Scope {
    pub fn new(cluster: &str, aws_cluster: View) -> Scope {
        Scope {
            api: Client {
                region: aws_cluster.str("/spec/region").to_string(),
            },
            cluster: cluster.to_string(),
            obj: aws_cluster,
            conditions: vec![],
        }
    }

    /// The tags of a resource in `role` named `name`, with `spec.additionalTags`.
    pub fn tags(&self, role: &str, name: &str) -> Vec<(String, String)> {
        let additional: Vec<(String, String)> = self
            .obj
            .get("/spec/additionalTags")
            .and_then(|t| t.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        tags::build(&self.cluster, role, name, &additional)
    }

    /// Records a CAPA condition as met.
    pub fn ready(&mut self, type_: &str) {
        self.conditions.push(condition(type_, true, "Ready", ""));
    }
}
