"""The bundle's model card for a person: nothing in it that ``manifest.json`` does not hold."""

from __future__ import annotations


def _fraction(value) -> str:
    return "–" if value is None else f"{value:.4f}"


def model_card(manifest: dict) -> str:
    """Markdown: what the servable is, how to call it, each member's accuracy and forward operations."""
    servable, signature, card = manifest["servable"], manifest["signature"], manifest["card"]
    inputs, outputs = signature["inputs"][0], signature["outputs"][0]
    _, h, w, c = inputs["shape"]
    lines = [
        f"# {servable['name']}: {servable['type']} of {servable['members']}",
        "",
        card["model_details"] + ".",
        "",
        "| | |",
        "|---|---|",
        f"| intended use | {card['intended_use']} |",
        f"| input | `{inputs['name']}`: float32 (N, {h}, {w}, {c}), {inputs['layout']}, {inputs['channels']}; from "
        f"uint8 pixels `{inputs['preprocessing']['text']}` |",
        f"| output | `{outputs['name']}`: float32 (N, {outputs['classes']}); class = argmax "
        f"({outputs['class_index']}) |",
        f"| combine | {manifest['combine']['how']} |",
        f"| forward operations per sample | {manifest['forward_ops_per_sample']:,} (all members, docs/counting.md) |",
        f"| training data | {card['training_data']} |",
        f"| evaluation data | {card['evaluation_data']} |",
        f"| limitations | {card['limitations']} |",
        "",
        "| member | task | validation accuracy | forward ops/sample | parameters |",
        "|---|---|---|---|---|",
    ]
    for member in manifest["members"]:
        lines.append(
            f"| {member['name']} | {member['task']} | {_fraction(member['validation_accuracy'])} | "
            f"{member['forward_ops_per_sample']:,} | {member['params']:,} |"
        )
    lines += [
        "",
        "Serve: `python -m aiperf_mpi.serve run BUNDLE --data … --out predictions.npz` (one process, or "
        "under `mpirun -n N` / `srun`); every file's sha256 is checked before a model is read.",
        "",
    ]
    return "\n".join(lines)
