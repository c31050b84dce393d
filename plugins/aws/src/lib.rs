//! The `aws` component: the provider logic of `capw_aws` exported as the WIT contract. The
//! logic lives in its own crate so it builds and is unit-tested natively.

capw_sdk::export_provider!(capw_aws::Aws);
