"""The driver's node side: prepare and unprepare claims, clean up stale ones.

Both calls are idempotent (kubelet repeats them, also after restarts) and
serialised by one lock. Prepare converges: it reads the claim, creates the
tokend group or brings an existing one of the same claim to the claim's
settings, writes the secret file and the CDI spec, and records the claim in
the checkpoint. A refused prepare undoes what it did: nothing half-created
stays. The clean-up removes what belongs to claims that no longer exist
(deleted while the node was down, or an unprepare that never came)."""
from __future__ import annotations

import json
import logging
import shutil
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from gslice import paths
from gslice.atomic_file import write_atomically
from gslice.errors import AlreadyExists, DaemonUnavailable, GsliceError, NotFound

from . import cdi, resource_slices, tokends
from .checkpoint import PREPARED, PREPARING, Checkpoint, CheckpointError, ClaimEntry, DeviceEntry
from .claim_plan import (LABEL_CLAIM, LABEL_CLAIM_UID, LABEL_MANAGED_BY, MANAGED_BY, ClaimPlan, PlanError,
                         UnknownDevice, plan_claim)
from .cluster_api import ApiUnavailable, ClusterApi
from .config import PluginConfig
from .tokends import GpuTokend

log = logging.getLogger("gslice.dra")
SECRET_FILE_NAME = "group-secret"
# In the claim's folder beside its secrets: which claim the folder and the
# CDI spec of that UID belong to, so that the clean-up can ask the API server
# about them when the checkpoint was lost (the spec names only the UID).
CLAIM_REF_FILE_NAME = "claim.json"


class PrepareError(Exception):
    """Preparing failed; the message goes to the pod's events."""


class UnprepareError(Exception):
    pass


class TokendUnreachable(UnprepareError):
    """A tokend to delete groups on did not answer (the clean-up retries)."""


@dataclass(frozen=True)
class PreparedDevice:
    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]
    share_id: str | None


def _devices_of(entry: ClaimEntry) -> list[PreparedDevice]:
    return [PreparedDevice(list(d.request_names), d.pool, d.device, list(d.cdi_device_ids), d.share_id)
            for d in entry.devices]


def _unreachable(gpu_uuid: str, exc: DaemonUnavailable) -> str:
    """For pod events: the operator CLI's hints of DaemonUnavailable do not apply here."""
    detail = f" ({exc.detail})" if exc.detail else ""
    gpu = f" of GPU {gpu_uuid}" if gpu_uuid else ""
    return f"tokend{gpu} is not reachable on {exc.socket_path}{detail}: is its container running?"


class Driver:
    def __init__(self, config: PluginConfig, api: ClusterApi, discover=tokends.discover):
        self.config = config
        self.api = api
        self.checkpoint = Checkpoint(config.checkpoint_path)
        self._discover = discover
        self._lock = threading.RLock()
        self._gpus: dict[str, GpuTokend] = {}
        self._unattributed: set[str] = set()  # UIDs whose kept files were reported (once each)

    # ----------------------------------------------------------------- GPUs
    def refresh_gpus(self) -> list[GpuTokend]:
        gpus = self._discover(self.config.tokend_admin_sockets)
        with self._lock:
            self._gpus = {gpu.device_name: gpu for gpu in gpus}
        return gpus

    def publish_slice(self) -> dict | None:
        gpus = self.refresh_gpus()
        return resource_slices.publish(self.api, self.config.driver_name, self.config.node_name, gpus,
                                       self.config.memory_reserve)

    # -------------------------------------------------------------- prepare
    def prepare(self, namespace: str, name: str, uid: str) -> list[PreparedDevice]:
        # The claim is read before taking the lock: a slow API server then
        # holds up this prepare only, not every prepare and unprepare on the
        # node. What it says still holds under the lock (an allocation does
        # not change; a re-created claim has another UID, which the plan
        # refuses); the checkpoint, which the other calls change, is read
        # under the lock.
        try:
            claim, unavailable = self.api.read_claim(namespace, name), None
        except ApiUnavailable as exc:
            claim, unavailable = None, exc
        with self._lock:
            previous = self.checkpoint.get(uid)
            if unavailable is not None:
                if previous is not None and previous.state == PREPARED and self._artifacts_present(previous):
                    log.warning("claim %s/%s: API server unavailable (%s); answering from the checkpoint",
                                namespace, name, unavailable)
                    return _devices_of(previous)
                raise PrepareError(f"cannot read claim {namespace}/{name}: {unavailable}") from None
            if claim is None:
                raise PrepareError(f"claim {namespace}/{name} (UID {uid}) does not exist in the API server")
            plans = self._plan(claim, uid)
            if not plans:
                return []
            self._check_shim_installed()
            spec_file = cdi.spec_path(self.config.cdi_dir, self.config.driver_name, uid)
            entry = ClaimEntry(uid=uid, namespace=namespace, name=name, state=PREPARING, spec_file=str(spec_file),
                               claim_dir=str(self.config.claims_dir / uid),
                               devices=[DeviceEntry(group=p.group, admin_socket=str(p.gpu.admin_socket),
                                                    gpu_uuid=p.gpu.uuid, pool=p.pool, device=p.device,
                                                    request_names=[p.request_name], share_id=p.share_id)
                                        for p in plans])
            if previous is None or previous.state != PREPARED:
                self.checkpoint.put(entry)  # before anything exists: a crash from here on is undone by clean-up
            try:
                self._write_claim_ref(Path(entry.claim_dir), namespace, name, uid)
                edits = {}
                for plan in plans:
                    secret = self._converge_group(plan)
                    secret_file = self._write_secret(Path(entry.claim_dir), SECRET_FILE_NAME + plan.suffix, secret)
                    doorbell = plan.gpu.client_socket_dir / paths.DOORBELL_FILE_NAME
                    edits[plan.cdi_name] = cdi.ClaimEdits(
                        shim_lib_dir=self.config.shim_lib_dir(), client_socket_dir=plan.gpu.client_socket_dir,
                        secret_file=secret_file, group=plan.group,
                        doorbell_file=doorbell if doorbell.is_file() else None)
                spec = cdi.build_spec(self.config.driver_name, edits)
                cdi.write_spec(spec_file, spec)
                ids = cdi.device_ids(spec)
                for plan, device in zip(plans, entry.devices):
                    device.cdi_device_ids = [ids[plan.cdi_name]]
                    nvidia = cdi.nvidia_device_id(self.config.nvidia_cdi_dirs, plan.gpu.uuid)
                    if nvidia:
                        device.cdi_device_ids.append(nvidia)
                entry = replace(entry, state=PREPARED)
                self.checkpoint.put(entry)
            except Exception as exc:
                message = str(exc) if isinstance(exc, PrepareError) else (
                    f"preparing claim {namespace}/{name} failed: {exc}")
                if previous is not None and previous.state == PREPARED:
                    log.warning("%s (the claim stays prepared as before)", message)
                else:
                    # Deletes only groups that carry this claim's UID: made
                    # by this call or by an attempt that crashed.
                    try:
                        self._undo(entry)
                    except TokendUnreachable:
                        message += "; what it made is removed by the clean-up once tokend answers"
                    except UnprepareError as undo_exc:
                        message += f"; undoing it failed too, the clean-up retries: {undo_exc}"
                raise PrepareError(message) from None
            for plan in plans:
                log.info("prepared claim %s (%s): group %s on GPU %s, request %.3f limit %.3f memory %d priority %s",
                         plan.claim_ref, uid, plan.group, plan.gpu.uuid, plan.request, plan.limit, plan.memory,
                         plan.priority.name.lower())
            return _devices_of(entry)

    def _plan(self, claim: dict, uid: str) -> list[ClaimPlan]:
        try:
            try:
                return plan_claim(claim, uid, self.config.driver_name, self.config.node_name, self._gpus)
            except UnknownDevice:
                self.refresh_gpus()  # a tokend may have started since the last look
                return plan_claim(claim, uid, self.config.driver_name, self.config.node_name, self._gpus)
        except PlanError as exc:
            raise PrepareError(str(exc)) from None

    def _check_shim_installed(self) -> None:
        """The CDI spec mounts the shim's host folder: refuse here, with what
        to do, rather than let the runtime fail on a missing mount source."""
        shim = self.config.shim_lib_dir() / cdi.SHIM_NAME
        if shim.is_file():
            return
        root = self.config.shim_root
        installed = sorted(p.parent.parent.name for p in root.glob(f"*/lib/{cdi.SHIM_NAME}")) if root.is_dir() else []
        raise PrepareError(
            f"the gslice shim is not installed on this node: {shim} does not exist (installed: "
            f"{', '.join(installed) or 'none'} under {root}). The DaemonSet's init step `gslice-dra install-shim "
            f"--shim-root {root}` puts it there; the plugin's --shim-root and --shim-version must name that folder")

    def _converge_group(self, plan: ClaimPlan) -> str:
        """Creates the group, or brings this claim's existing one to the plan; its secret."""
        settings = (f"request {plan.request:.1%}, limit {plan.limit:.1%}, memory {plan.memory} bytes, "
                    f"priority {plan.priority.name.lower()}")
        try:
            with plan.gpu.admin() as admin:
                try:
                    created = admin.create_group(plan.group, request=plan.request, limit=plan.limit,
                                                 memory=plan.memory, priority=plan.priority, labels=plan.labels)
                    return created.secret
                except AlreadyExists:
                    pass
                existing = admin.get_group(plan.group)
                if existing.labels.get(LABEL_CLAIM_UID) != plan.uid:
                    raise PrepareError(f"GPU {plan.gpu.uuid} already has a group {plan.group!r} that was not made "
                                       f"for claim {plan.claim_ref}; delete it (gslice group rm {plan.group})")
                if (existing.request, existing.limit, existing.memory_quota, existing.priority) != (
                        plan.request, plan.limit, plan.memory, plan.priority):
                    admin.update_group(plan.group, request=plan.request, limit=plan.limit, memory=plan.memory,
                                       priority=plan.priority)
                return admin.group_secret(plan.group)
        except PrepareError:
            raise
        except DaemonUnavailable as exc:
            raise PrepareError(f"group {plan.group} for claim {plan.claim_ref} cannot be made now: "
                               f"{_unreachable(plan.gpu.uuid, exc)} kubelet retries the prepare") from None
        except GsliceError as exc:
            raise PrepareError(f"tokend of GPU {plan.gpu.uuid} refused group {plan.group} for claim "
                               f"{plan.claim_ref} ({settings}): {exc}") from None

    @staticmethod
    def _write_secret(claim_dir: Path, file_name: str, secret: str) -> Path:
        claim_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = claim_dir / file_name
        # Readable by any uid in the container (it is mounted read-only into
        # this claim's containers only); the 0700 folder keeps it from other
        # users on the host.
        write_atomically(path, (secret + "\n").encode(), mode=0o444)
        return path

    @staticmethod
    def _write_claim_ref(claim_dir: Path, namespace: str, name: str, uid: str) -> None:
        claim_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        ref = {"namespace": namespace, "name": name, "uid": uid}
        write_atomically(claim_dir / CLAIM_REF_FILE_NAME, (json.dumps(ref) + "\n").encode(), mode=0o600)

    def _read_claim_ref(self, uid: str) -> tuple[str, str] | None:
        """(namespace, name) of claim `uid` from its folder, None when not known there."""
        try:
            ref = json.loads((self.config.claims_dir / uid / CLAIM_REF_FILE_NAME).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(ref, dict) or ref.get("uid") != uid or not ref.get("namespace") or not ref.get("name"):
            return None
        return ref["namespace"], ref["name"]

    def _artifacts_present(self, entry: ClaimEntry) -> bool:
        return Path(entry.spec_file).exists() and Path(entry.claim_dir).is_dir()

    # ------------------------------------------------------------ unprepare
    def unprepare(self, uid: str) -> None:
        with self._lock:
            entry = self.checkpoint.get(uid)
            if entry is None:
                # Unknown here (never prepared, or already undone): still make
                # sure nothing of it is left, by the names prepare would use.
                entry = ClaimEntry(uid=uid, namespace="", name="", state="unknown",
                                   spec_file=str(cdi.spec_path(self.config.cdi_dir, self.config.driver_name, uid)),
                                   claim_dir=str(self.config.claims_dir / uid))
            self._undo(entry)

    def _undo(self, entry: ClaimEntry) -> None:
        """Deletes the claim's groups (those carrying its UID), spec, secrets
        and checkpoint entry. Without recorded devices, every tokend is asked."""
        if not entry.devices and not self._gpus:
            self.refresh_gpus()
        sockets = sorted({d.admin_socket for d in entry.devices}) or [
            str(g.admin_socket) for g in self._gpus.values()]
        for socket in sockets:
            self._delete_groups(socket, entry.uid)
        Path(entry.spec_file).unlink(missing_ok=True)
        shutil.rmtree(entry.claim_dir, ignore_errors=True)
        self.checkpoint.remove(entry.uid)
        log.info("claim %s/%s (%s) unprepared", entry.namespace, entry.name, entry.uid)

    @staticmethod
    def _delete_groups(admin_socket: str, uid: str) -> None:
        """Deletes the groups on one tokend that were made for claim `uid` (gone already: success)."""
        from gslice.client import Client
        try:
            with Client(admin_socket, timeout=tokends.STATUS_TIMEOUT) as admin:
                for group in admin.list_groups():
                    if group.labels.get(LABEL_CLAIM_UID) == uid:
                        try:
                            admin.delete_group(group.name)
                        except NotFound:
                            pass
        except DaemonUnavailable as exc:
            raise TokendUnreachable(f"cannot delete the groups of claim {uid}: {_unreachable('', exc)}") from None
        except GsliceError as exc:
            raise UnprepareError(f"cannot delete the groups of claim {uid} on {admin_socket}: {exc}") from None

    # -------------------------------------------------------------- clean-up
    def cleanup(self) -> list[str]:
        """Undo claims that no longer exist; returns their UIDs. Does nothing
        to claims when the API server cannot say (never deletes on
        uncertainty). A claim or GPU that cannot be cleaned up now (tokend
        down, a group with processes still attached) is logged and retried
        next round; it never holds up the others or the later passes."""
        removed: list[str] = []
        with self._lock:
            entries = self.checkpoint.load()
            try:
                self._cleanup_checkpointed(entries, removed)
                asked = self._cleanup_orphan_groups(set(entries), removed)
                self._cleanup_orphan_files(set(entries), asked, removed)
            except ApiUnavailable as exc:
                log.warning("clean-up of claims skipped: %s", exc)
        return removed

    def _cleanup_checkpointed(self, entries: dict[str, ClaimEntry], removed: list[str]) -> None:
        """Undoes the checkpointed claims that are gone, adding their UIDs to `removed`."""
        for uid, entry in entries.items():
            if self._claim_exists(entry.namespace, entry.name, uid):
                continue
            log.info("claim %s/%s (%s) is gone: cleaning up", entry.namespace, entry.name, uid)
            try:
                self._undo(entry)
            except (UnprepareError, GsliceError, CheckpointError, OSError) as exc:
                log.warning("claim %s/%s (%s) is gone but cannot be cleaned up now (retried next round): %s",
                            entry.namespace, entry.name, uid, exc)
                continue
            removed.append(uid)

    def _claim_exists(self, namespace: str, name: str, uid: str) -> bool:
        if not namespace or not name:
            return False
        claim = self.api.read_claim(namespace, name)
        return claim is not None and (claim.get("metadata") or {}).get("uid") == uid

    def _cleanup_orphan_groups(self, known: set[str], removed: list[str]) -> dict[str, bool]:
        """Deletes the groups this driver made whose claim is neither in the
        checkpoint nor in the API server (e.g. the checkpoint was lost),
        adding their claims' UIDs to `removed`. Returns, for the claims it
        asked about, whether they exist."""
        asked: dict[str, bool] = {}
        for gpu in self.refresh_gpus():
            try:
                with gpu.admin() as admin:
                    groups = admin.list_groups()
            except GsliceError as exc:
                log.warning("orphan groups on GPU %s not looked for now (retried next round): %s", gpu.uuid, exc)
                continue
            for group in groups:
                uid = group.labels.get(LABEL_CLAIM_UID)
                if group.labels.get(LABEL_MANAGED_BY) != MANAGED_BY or not uid or uid in known:
                    continue
                namespace, _, name = group.labels.get(LABEL_CLAIM, "").partition("/")
                if uid not in asked:
                    asked[uid] = uid not in removed and self._claim_exists(namespace, name, uid)
                if asked[uid]:
                    continue
                log.info("group %s on GPU %s belongs to claim %s, which is gone: deleting it", group.name,
                         gpu.uuid, uid)
                try:
                    self._delete_groups(str(gpu.admin_socket), uid)
                except UnprepareError as exc:
                    log.warning("group %s on GPU %s cannot be deleted now (retried next round): %s", group.name,
                                gpu.uuid, exc)
                    continue
                if uid not in removed:
                    removed.append(uid)
        return asked

    def _cleanup_orphan_files(self, known: set[str], asked: dict[str, bool], removed: list[str]) -> None:
        """Deletes the CDI specs and claim folders (secrets) of claims not in
        the checkpoint once the API server says the claim is gone, adding
        their UIDs to `removed`. Not being in the checkpoint is not enough:
        after a lost checkpoint they are live claims' files, and a container
        restart without its spec fails ("unresolvable CDI device"). The claim
        is found by its group's label (the orphan-group pass asked already)
        or by the claim folder's claim.json; files of a claim found by
        neither are kept and reported."""
        specs = cdi.our_spec_files(self.config.cdi_dir, self.config.driver_name)
        folders = ({p.name for p in self.config.claims_dir.iterdir() if p.is_dir()}
                   if self.config.claims_dir.is_dir() else set())
        for uid in sorted((set(specs) | folders) - known):
            if uid in removed:
                exists = False
            elif uid in asked:
                exists = asked[uid]
            else:
                ref = self._read_claim_ref(uid)
                if ref is None:
                    if uid not in self._unattributed:
                        self._unattributed.add(uid)
                        log.warning("CDI spec / claim folder of UID %s is in no checkpoint entry and names no "
                                    "claim (no group of it, no %s): kept; delete %s and %s by hand once no pod "
                                    "uses that claim", uid, CLAIM_REF_FILE_NAME,
                                    specs.get(uid) or cdi.spec_path(self.config.cdi_dir, self.config.driver_name,
                                                                    uid), self.config.claims_dir / uid)
                    continue
                exists = self._claim_exists(*ref, uid)
            if exists:
                continue
            log.info("CDI spec and claim folder of claim %s, which is gone: deleting them", uid)
            try:
                if uid in specs:
                    specs[uid].unlink(missing_ok=True)
                shutil.rmtree(self.config.claims_dir / uid)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("files of claim %s cannot be deleted now (retried next round): %s", uid, exc)
                continue
            self._unattributed.discard(uid)
            if uid not in removed:
                removed.append(uid)
