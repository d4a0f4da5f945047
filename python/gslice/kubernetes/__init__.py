"""gslice on Kubernetes: a DRA (Dynamic Resource Allocation, resource.k8s.io/v1)
kubelet plugin that turns a claim for "30% of a GPU and 8 GiB" into a tokend
group and hands the pod the shim, the client socket's directory, the group
name and its secret through a CDI spec.

One file per concern:
  config.py            the plugin's settings (driver name, node, paths)
  group_config.py      DeviceClass / claim opaque configs -> limit, priority
  cluster_api.py       the API server, thin: claims and ResourceSlices (kubernetes client)
  fake_cluster.py      the same interface in memory, for tests
  tokends.py           the node's GPUs, learned from each tokend's status (admin API)
  resource_slices.py   the node's ResourceSlice: one shareable device per GPU
  claim_plan.py        a claim's allocation -> the group it needs (pure)
  cdi.py               CDI spec files: content, version, names, atomic writes
  checkpoint.py        prepared claims, persisted atomically
  driver.py            NodePrepare / NodeUnprepare / stale-claim clean-up
  registration.py      pluginregistration.Registration (GetInfo, NotifyRegistrationStatus)
  dra_service.py       k8s.io.kubelet.pkg.apis.dra.{v1,v1beta1}.DRAPlugin
  plugin.py            both gRPC servers on unix sockets + the periodic loop
  __main__.py          gslice-dra run | install-shim | check
"""
DRIVER_NAME = "gslice.dev"
