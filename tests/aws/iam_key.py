"""Makes an IAM user with an access key allowed EC2 and Elastic Load Balancing, in a moto
started with INITIAL_NO_AUTH_ACTION_COUNT=3 (these are its three unchecked calls), and prints
the key as JSON. Usage: iam_key.py ENDPOINT"""
import json
import sys

import boto3

iam = boto3.client(
    "iam",
    endpoint_url=sys.argv[1],
    region_name="us-east-1",
    aws_access_key_id="bootstrap",
    aws_secret_access_key="bootstrap",
)
iam.create_user(UserName="capw")
iam.put_user_policy(
    UserName="capw",
    PolicyName="capa",
    PolicyDocument=json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["ec2:*", "elasticloadbalancing:*"], "Resource": "*"}
            ],
        }
    ),
)
key = iam.create_access_key(UserName="capw")["AccessKey"]
print(json.dumps({"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}))
