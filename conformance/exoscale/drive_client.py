#!/usr/bin/env python3
"""Drives an Exoscale API (the fake one) with Exoscale's official Python client.

Usage: drive_client.py --url http://127.0.0.1:PORT --zone ZONE --key KEY --secret SECRET
                       [--managed-labels JSON]

The zone's endpoint is URL/ZONE/v2 (the fake's layout). The script lists zones, instance
types, templates, security groups, anti-affinity groups, SSH keys and private networks; creates
an instance with user-data, labels, security groups, an anti-affinity group and every SSH key,
waits for its operation, gets it, finds it by label, updates its labels, attaches a private
network and deletes it. It then leaves two instances behind for the caller to compare with
what the plugin makes: one labelled with --managed-labels (as if the plugin had launched it),
one without them. Prints one JSON object: {"zone", "managed", "unmanaged", "steps"}.
Any step whose answer is not what the API definition promises raises, exiting non-zero.
"""

import argparse
import base64
import json
import sys

from exoscale.api.v2 import Client


def need(condition, message):
    if not condition:
        raise SystemExit(f"drive_client: {message}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--zone", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--managed-labels", default="{}")
    args = parser.parse_args()
    steps = []
    client = Client(args.key, args.secret, url=f"{args.url}/{args.zone}/v2")

    zones = [z["name"] for z in client.list_zones()["zones"]]
    need(args.zone in zones, f"zone {args.zone} not in {zones}")
    steps.append("list-zones")
    types = client.list_instance_types()["instance-types"]
    small = next(t for t in types if t["family"] == "standard" and t["size"] == "small")
    steps.append("list-instance-types")
    templates = client.list_templates(visibility="public")["templates"]
    ubuntu = max((t for t in templates if t["name"].startswith("Linux Ubuntu 24.04")), key=lambda t: t["created-at"])
    steps.append("list-templates")
    security_group = client.list_security_groups()["security-groups"][0]
    anti_affinity = client.list_anti_affinity_groups()["anti-affinity-groups"][0]
    keys = [k["name"] for k in client.list_ssh_keys()["ssh-keys"]]
    network = client.list_private_networks()["private-networks"][0]
    steps.append("list-security-groups, anti-affinity-groups, ssh-keys, private-networks")

    user_data = base64.b64encode(b"#cloud-config\nruncmd: [echo hello]\n").decode()
    # The client takes body fields as keyword arguments, '-' spelled '_'.
    operation = client.create_instance(
        name="client-made",
        instance_type={"id": small["id"]},
        template={"id": ubuntu["id"]},
        disk_size=20,
        user_data=user_data,
        labels={"made-by": "official-client"},
        security_groups=[{"id": security_group["id"]}],
        anti_affinity_groups=[{"id": anti_affinity["id"]}],
        ssh_keys=[{"name": k} for k in keys],
    )
    done = client.wait(operation["id"])
    need(done["state"] == "success", f"create ended {done}")
    instance_id = done["reference"]["id"]
    steps.append("create-instance + wait")

    got = client.get_instance(id=instance_id)
    need(got["name"] == "client-made" and got["user-data"] == user_data, f"get-instance gave {got}")
    need(sorted(k["name"] for k in got["ssh-keys"]) == sorted(keys), f"ssh-keys {got['ssh-keys']}")
    need([g["id"] for g in got["anti-affinity-groups"]] == [anti_affinity["id"]], f"{got['anti-affinity-groups']}")
    steps.append("get-instance")
    found = client.list_instances(labels="made-by=official-client")["instances"]
    need([i["id"] for i in found] == [instance_id], f"list by label gave {found}")
    steps.append("list-instances by label")
    done = client.wait(client.update_instance(id=instance_id, labels={"made-by": "official-client", "stage": "updated"})["id"])
    need(done["state"] == "success", f"update ended {done}")
    need(client.get_instance(id=instance_id)["labels"].get("stage") == "updated", "labels not updated")
    steps.append("update-instance labels")
    done = client.wait(client.attach_instance_to_private_network(id=network["id"], instance={"id": instance_id})["id"])
    need(done["state"] == "success", f"attach ended {done}")
    attached = [n["id"] for n in client.get_instance(id=instance_id).get("private-networks", [])]
    need(attached == [network["id"]], f"private networks {attached}")
    steps.append("attach-instance-to-private-network")
    done = client.wait(client.delete_instance(id=instance_id)["id"])
    need(done["state"] == "success", f"delete ended {done}")
    steps.append("delete-instance")

    def launch(name, labels):
        operation = client.create_instance(
            name=name,
            instance_type={"id": small["id"]},
            template={"id": ubuntu["id"]},
            disk_size=20,
            labels=labels,
            security_groups=[{"id": security_group["id"]}],
        )
        done = client.wait(operation["id"])
        need(done["state"] == "success", f"create {name} ended {done}")
        return done["reference"]["id"]

    managed = launch("client-managed", json.loads(args.managed_labels))
    unmanaged = launch("client-unmanaged", {"owner": "someone-else"})
    steps.append("create two instances for the plugin")
    print(json.dumps({"zone": args.zone, "managed": managed, "unmanaged": unmanaged, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
