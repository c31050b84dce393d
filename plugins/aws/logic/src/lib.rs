//! `aws`: an infrastructure provider for EC2, in the shape of Cluster API Provider AWS.
//! AWSClusters become a VPC with public and private subnets per zone, gateways, route tables,
//! security groups and a network load balancer; AWSMachines become instances booted from their
//! bootstrap data. Every call goes through the host's `capw:host/aws`, which signs it: this
//! component never holds a credential. Nothing here keeps state: every resource carries CAPA's
//! tags and is found by them, so a call interrupted anywhere is finished by the next.

mod cidr;
mod client;
mod instances;
mod load_balancer;
mod network;
mod provider;
mod scope;
mod security_groups;
mod tags;
mod xml;

pub use provider::Aws;
