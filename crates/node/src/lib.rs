//! What runs on the machines rather than in the management host: the load balancer in front of
//! a cluster's control plane (`capw lb`), the node agent's Node registration
//! (`capw node-agent`), and the node image those run from (`capw image build`).

pub mod agent;
pub mod image;
pub mod kubeadm;
pub mod kubeadm_node;
pub mod lb;
