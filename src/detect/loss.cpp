#include "meridian/detect/loss.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "meridian/comm/communicator.h"
#include "meridian/detect/boxes.h"

namespace meridian::detect {

namespace {

constexpr double kPi = 3.14159265358979323846;

// [B, no, H_l, W_l] levels -> [B, A, no], anchors in make_anchors' order.
at::Tensor flatten_levels(const std::vector<at::Tensor>& levels) {
  if (levels.empty()) throw std::invalid_argument("detect: no head levels");
  const int64_t b = levels[0].size(0), no = levels[0].size(1);
  std::vector<at::Tensor> flat;
  for (const auto& l : levels) {
    if (l.dim() != 4 || l.size(0) != b || l.size(1) != no)
      throw std::invalid_argument("detect: head levels must be [B, no, H, W] with the same B and no");
    flat.push_back(l.reshape({b, no, -1}));
  }
  return at::cat(flat, 2).permute({0, 2, 1});
}

int64_t classes_of(const std::vector<at::Tensor>& levels, int64_t reg_max) {
  const int64_t c = levels.at(0).size(1) - 4 * reg_max;
  if (c < 1)
    throw std::invalid_argument("detect: head levels have " + std::to_string(levels[0].size(1)) +
                                " channels, expected 4 * reg_max (" + std::to_string(4 * reg_max) + ") + classes");
  return c;
}

}  // namespace

Anchors make_anchors(const std::vector<at::Tensor>& levels, const std::vector<int64_t>& strides, double offset) {
  if (levels.size() != strides.size() || levels.empty())
    throw std::invalid_argument("detect: make_anchors needs one stride per level (" + std::to_string(levels.size()) +
                                " levels, " + std::to_string(strides.size()) + " strides)");
  const auto f32 = levels[0].options().dtype(at::kFloat);
  std::vector<at::Tensor> points, stride_list;
  for (size_t l = 0; l < levels.size(); ++l) {
    const int64_t h = levels[l].size(-2), w = levels[l].size(-1);
    const double s = double(strides[l]);
    const auto xs = (at::arange(w, f32) + offset) * s;
    const auto ys = (at::arange(h, f32) + offset) * s;
    points.push_back(
        at::stack({xs.view({1, w}).expand({h, w}), ys.view({h, 1}).expand({h, w})}, -1).reshape({h * w, 2}));
    stride_list.push_back(at::full({h * w}, s, f32));
  }
  return {at::cat(points, 0), at::cat(stride_list, 0)};
}

at::Tensor dist2bbox(const at::Tensor& distances, const at::Tensor& points) {
  return at::cat({points - distances.narrow(-1, 0, 2), points + distances.narrow(-1, 2, 2)}, -1);
}

at::Tensor bbox2dist(const at::Tensor& points, const at::Tensor& boxes, double max_distance) {
  return at::cat({points - boxes.narrow(-1, 0, 2), boxes.narrow(-1, 2, 2) - points}, -1)
      .clamp(0.0, max_distance - 0.01);
}

at::Tensor dfl_decode(const at::Tensor& logits, int64_t reg_max) {
  if (logits.dim() < 1 || logits.size(-1) != 4 * reg_max)
    throw std::invalid_argument("detect: DFL logits need a last dimension of 4 * reg_max = " +
                                std::to_string(4 * reg_max));
  auto shape = logits.sizes().vec();
  shape.back() = 4;
  shape.push_back(reg_max);
  const auto p = at::softmax(logits.reshape(shape), -1, at::kFloat);
  return at::matmul(p, at::arange(reg_max, p.options()));
}

at::Tensor dfl_loss(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t reg_max = logits.size(-1);
  const auto logp = at::log_softmax(logits, -1, at::kFloat);
  const auto t = targets.to(at::kFloat);
  const auto left = t.floor().to(at::kLong).clamp(0, reg_max - 1);
  const auto right = (left + 1).clamp_max(reg_max - 1);
  const auto wl = left.to(at::kFloat) + 1 - t, wr = 1 - wl;
  const auto lp = logp.gather(-1, left.unsqueeze(-1)).squeeze(-1),
             rp = logp.gather(-1, right.unsqueeze(-1)).squeeze(-1);
  return (-(lp * wl + rp * wr)).mean(-1);
}

at::Tensor ciou(const at::Tensor& a, const at::Tensor& b, double eps) {
  const auto ax1 = a.select(-1, 0), ay1 = a.select(-1, 1), ax2 = a.select(-1, 2), ay2 = a.select(-1, 3);
  const auto bx1 = b.select(-1, 0), by1 = b.select(-1, 1), bx2 = b.select(-1, 2), by2 = b.select(-1, 3);
  const auto wa = ax2 - ax1, ha = (ay2 - ay1).clamp_min(eps);
  const auto wb = bx2 - bx1, hb = (by2 - by1).clamp_min(eps);
  const auto inter =
      (at::min(ax2, bx2) - at::max(ax1, bx1)).clamp_min(0) * (at::min(ay2, by2) - at::max(ay1, by1)).clamp_min(0);
  const auto uni = wa * ha + wb * hb - inter + eps;
  const auto iou = inter / uni;
  const auto cw = at::max(ax2, bx2) - at::min(ax1, bx1), ch = at::max(ay2, by2) - at::min(ay1, by1);
  const auto c2 = cw * cw + ch * ch + eps;
  const auto rho2 = ((bx1 + bx2 - ax1 - ax2).pow(2) + (by1 + by2 - ay1 - ay2).pow(2)) / 4;
  const auto v = (4.0 / (kPi * kPi)) * (at::atan(wb / hb) - at::atan(wa / ha)).pow(2);
  const auto alpha = (v / (v - iou + (1 + eps))).detach();
  return iou - (rho2 / c2 + v * alpha);
}

Assignment assign(const at::Tensor& pred_scores_in, const at::Tensor& pred_boxes_in, const at::Tensor& anchor_points,
                  const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& gt_offsets,
                  const AssignerOptions& o) {
  at::NoGradGuard no_grad;
  if (pred_scores_in.dim() != 3 || pred_boxes_in.dim() != 3 || pred_boxes_in.size(2) != 4 ||
      pred_boxes_in.size(0) != pred_scores_in.size(0) || pred_boxes_in.size(1) != pred_scores_in.size(1))
    throw std::invalid_argument("detect: assign needs pred_scores [B, A, C] and pred_boxes [B, A, 4]");
  const int64_t bsz = pred_scores_in.size(0), na = pred_scores_in.size(1), nc = pred_scores_in.size(2);
  if (anchor_points.dim() != 2 || anchor_points.size(0) != na || anchor_points.size(1) != 2)
    throw std::invalid_argument("detect: assign needs anchor_points [A, 2] with A = " + std::to_string(na));
  if (gt_boxes.dim() != 2 || gt_boxes.size(1) != 4 || gt_classes.dim() != 1 || gt_classes.size(0) != gt_boxes.size(0))
    throw std::invalid_argument("detect: assign needs gt_boxes [M, 4] and gt_classes [M]");
  if (gt_offsets.dim() != 1 || gt_offsets.size(0) != bsz + 1)
    throw std::invalid_argument("detect: gt_offsets must be [B + 1] with B = " + std::to_string(bsz));
  const auto dev = pred_scores_in.device();
  const auto f32 = pred_scores_in.options().dtype(at::kFloat);
  const auto offsets = gt_offsets.to(at::kCPU, at::kLong).contiguous();
  const int64_t* off = offsets.data_ptr<int64_t>();
  const int64_t m_total = gt_boxes.size(0);
  int64_t max_m = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    if (off[b] < 0 || off[b + 1] < off[b] || off[b + 1] > m_total)
      throw std::invalid_argument("detect: gt_offsets must be non-decreasing within [0, " + std::to_string(m_total) +
                                  "]");
    max_m = std::max(max_m, off[b + 1] - off[b]);
  }
  if (off[0] != 0 || off[bsz] != m_total)
    throw std::invalid_argument("detect: gt_offsets must start at 0 and end at M = " + std::to_string(m_total));
  // The class range: checked on host tensors only (on a GPU the check would make the host wait for
  // the device every step; detect's task checks the host batch before copying it).
  if (m_total > 0 && gt_classes.is_cpu() &&
      (gt_classes.min().item<int64_t>() < 0 || gt_classes.max().item<int64_t>() >= nc))
    throw std::invalid_argument("detect: gt class outside [0, " + std::to_string(nc) + ")");
  const auto classes_long = gt_classes.to(dev, at::kLong);

  Assignment r;
  r.foreground = at::zeros({bsz, na}, f32.dtype(at::kBool));
  r.target_gt = at::full({bsz, na}, -1, f32.dtype(at::kLong));
  r.target_classes = at::full({bsz, na}, -1, f32.dtype(at::kLong));
  r.target_boxes = at::zeros({bsz, na, 4}, f32);
  r.target_scores = at::zeros({bsz, na, nc}, f32);
  if (max_m == 0) return r;

  // Pad to [B, max_m] with a validity mask; flat_index maps padded slots back to the flat list.
  auto gt = at::zeros({bsz, max_m, 4}, f32);
  auto labels = at::zeros({bsz, max_m}, f32.dtype(at::kLong));
  auto flat_index = at::full({bsz, max_m}, -1, f32.dtype(at::kLong));
  auto valid = at::zeros({bsz, max_m}, f32.dtype(at::kBool));
  const auto boxes_f = gt_boxes.to(dev, at::kFloat);
  for (int64_t b = 0; b < bsz; ++b) {
    const int64_t m = off[b + 1] - off[b];
    if (m == 0) continue;
    gt[b].narrow(0, 0, m).copy_(boxes_f.narrow(0, off[b], m));
    labels[b].narrow(0, 0, m).copy_(classes_long.narrow(0, off[b], m));
    flat_index[b].narrow(0, 0, m).copy_(at::arange(off[b], off[b + 1], f32.dtype(at::kLong)));
    valid[b].narrow(0, 0, m).fill_(true);
  }
  const auto scores = pred_scores_in.to(at::kFloat);
  const auto pboxes = pred_boxes_in.to(at::kFloat);
  const auto points = anchor_points.to(dev, at::kFloat);

  // Candidates: anchor centre strictly (eps) inside the gt box, its sides widened to at least
  // min_side about its centre (Ultralytics' select_candidates_in_gts, through xywh as it does). [B, M, A]
  auto candidate_boxes = gt;
  if (o.min_side > 0) {
    const auto centre = (gt.narrow(-1, 0, 2) + gt.narrow(-1, 2, 2)) / 2;
    auto wh = gt.narrow(-1, 2, 2) - gt.narrow(-1, 0, 2);
    wh = at::where(wh.lt(o.min_side).logical_and(valid.unsqueeze(-1)), at::full({}, o.min_side, f32), wh);
    candidate_boxes = at::cat({centre - wh / 2, centre + wh / 2}, -1);
  }
  const auto p = points.view({1, 1, na, 2});
  const auto lt = candidate_boxes.narrow(-1, 0, 2).unsqueeze(2), rb = candidate_boxes.narrow(-1, 2, 2).unsqueeze(2);
  const auto inside = at::cat({p - lt, rb - p}, -1).amin(-1).gt(o.eps);
  const auto candidate = inside.logical_and(valid.unsqueeze(-1));

  // Alignment metric on candidates: score of the gt's class ^ alpha * CIoU ^ beta.
  const auto class_scores =
      scores.transpose(1, 2).gather(1, labels.unsqueeze(-1).expand({bsz, max_m, na}));  // [B, M, A]
  const auto overlaps =
      at::where(candidate, ciou(gt.unsqueeze(2), pboxes.unsqueeze(1)).clamp_min(0), at::zeros({}, f32));
  const auto bbox_scores = at::where(candidate, class_scores, at::zeros({}, f32));
  const auto align = bbox_scores.pow(o.alpha) * overlaps.pow(o.beta);

  // Top-k anchors per gt by alignment, kept only where they are candidates.
  const int64_t k = std::min(o.topk, na);
  const auto topk_idx = std::get<1>(at::topk(align, k, -1, /*largest=*/true, /*sorted=*/true));
  auto in_topk = at::zeros({bsz, max_m, na}, f32.dtype(at::kBool));
  in_topk.scatter_(-1, topk_idx, true);
  auto positive = in_topk.logical_and(candidate);  // [B, M, A]

  // An anchor positive for several gts goes to the gt with the highest CIoU among every gt it is a
  // candidate of (Ultralytics' select_highest_overlaps: not only those it is in the top k of).
  // Always computed: an `if any count > 1` would read the device every step (a GPU host wait), and
  // where no anchor has two gts the where() keeps `positive` as it is.
  const auto count = positive.sum(1);              // [B, A]
  const auto best = std::get<1>(overlaps.max(1));  // [B, A]
  const auto is_best = at::zeros_like(positive).scatter_(1, best.unsqueeze(1), true);
  positive = at::where(count.gt(1).unsqueeze(1), is_best, positive);
  const auto fg = positive.any(1);                        // [B, A]
  const auto gt_idx = positive.to(at::kFloat).argmax(1);  // [B, A] padded slot

  r.foreground = fg;
  const auto slot_class = labels.gather(1, gt_idx);
  const auto slot_flat = flat_index.gather(1, gt_idx);
  r.target_classes = at::where(fg, slot_class, at::full({}, -1, slot_class.options()));
  r.target_gt = at::where(fg, slot_flat, at::full({}, -1, slot_flat.options()));
  r.target_boxes = gt.gather(1, gt_idx.unsqueeze(-1).expand({bsz, na, 4})) * fg.unsqueeze(-1).to(at::kFloat);

  // Normalised alignment: per gt, alignment / max alignment * max CIoU, over its positives.
  const auto pos_f = positive.to(at::kFloat);
  const auto align_pos = align * pos_f;
  const auto max_align = align_pos.amax(-1, true);                            // [B, M, 1]
  const auto max_overlap = (overlaps * pos_f).amax(-1, true);                 // [B, M, 1]
  const auto norm = (align_pos * max_overlap / (max_align + o.eps)).amax(1);  // [B, A]
  const auto one_hot = at::one_hot(slot_class, nc).to(at::kFloat) * fg.unsqueeze(-1).to(at::kFloat);
  r.target_scores = one_hot * norm.unsqueeze(-1);
  return r;
}

DetectionLoss detection_loss(const std::vector<at::Tensor>& levels, const std::vector<int64_t>& strides,
                             const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& gt_offsets,
                             const DetectionLossOptions& o, comm::Communicator* comm) {
  const int64_t reg_max = o.reg_max, nc = classes_of(levels, reg_max);
  const auto pred = flatten_levels(levels);  // [B, A, no]
  const int64_t bsz = pred.size(0);
  const auto distri = pred.narrow(-1, 0, 4 * reg_max);  // [B, A, 4R]
  const auto logits = pred.narrow(-1, 4 * reg_max, nc).to(at::kFloat);
  const auto anchors = make_anchors(levels, strides);
  const auto stride = anchors.strides.unsqueeze(-1);  // [A, 1]
  const auto grid = anchors.points / stride;          // anchor centres in stride units

  const auto pred_boxes = dist2bbox(dfl_decode(distri, reg_max), grid);  // [B, A, 4] stride units
  AssignerOptions assigner = o.assigner;
  if (assigner.min_side < 0) assigner.min_side = double(strides.size() > 1 ? strides[1] : strides.at(0));
  const auto a = assign(logits.detach().sigmoid(), pred_boxes.detach() * stride, anchors.points, gt_boxes, gt_classes,
                        gt_offsets, assigner);
  const auto local_sum = at::clamp_min(a.target_scores.sum(), 1.0);
  // S and B of the whole global batch with `comm`, this rank's otherwise.
  // Both stay on the device (no host read): B scales the total as a tensor.
  at::Tensor score_sum = local_sum;
  at::Tensor batch = at::full({}, double(bsz), logits.options());
  if (comm) {
    at::Tensor both =
        at::stack({a.target_scores.sum().to(at::kDouble), at::full({}, double(bsz), at::kDouble).to(logits.device())});
    comm->allreduce(both, comm::ReduceOp::Sum);
    score_sum = at::clamp_min(both[0], 1.0).to(at::kFloat);
    batch = both[1].to(at::kFloat);
  }

  const auto cls =
      at::binary_cross_entropy_with_logits(logits, a.target_scores, {}, {}, at::Reduction::None).sum() / score_sum;
  at::Tensor box = at::zeros({}, logits.options()), dfl = at::zeros({}, logits.options());
  // The positives' indices: a data-dependent shape, so on a GPU the step's second host wait (nonzero
  // must learn the count). Kept: the box and DFL terms then run over the P positives (a few hundred
  // to a few thousand) instead of all B x A anchors (B x 8400 at 640 px), and a masked form over
  // every anchor would also evaluate CIoU on the empty targets of background anchors (0/0).
  const auto fg_index = a.foreground.reshape({-1}).nonzero().squeeze(1);
  if (fg_index.numel() > 0) {
    const auto weight = a.target_scores.sum(-1).reshape({-1}).index_select(0, fg_index);       // [P]
    const auto target = (a.target_boxes / stride).reshape({-1, 4}).index_select(0, fg_index);  // stride units
    const auto pb = pred_boxes.reshape({-1, 4}).index_select(0, fg_index);
    box = ((1.0 - ciou(pb, target)) * weight).sum() / score_sum;
    const auto points = grid.unsqueeze(0).expand({bsz, grid.size(0), 2}).reshape({-1, 2}).index_select(0, fg_index);
    const auto ltrb = bbox2dist(points, target, double(reg_max - 1));
    const auto dist_logits = distri.reshape({-1, 4, reg_max}).index_select(0, fg_index);
    dfl = (dfl_loss(dist_logits, ltrb) * weight).sum() / score_sum;
  }
  DetectionLoss r;
  const auto wbox = box * o.box, wcls = cls * o.cls, wdfl = dfl * o.dfl;
  r.total = (wbox + wcls + wdfl) * batch;
  const auto own = (score_sum / local_sum).detach();  // 1 without comm
  r.box = (wbox * own).detach();
  r.cls = (wcls * own).detach();
  r.dfl = (wdfl * own).detach();
  return r;
}

std::vector<Detections> decode(const std::vector<at::Tensor>& levels, const std::vector<int64_t>& strides,
                               int64_t reg_max, double conf_threshold, double iou_threshold, int64_t max_det,
                               bool multi_label, int64_t max_nms) {
  at::NoGradGuard no_grad;
  const int64_t nc = classes_of(levels, reg_max);
  const auto pred = flatten_levels(levels).to(at::kFloat);
  const auto anchors = make_anchors(levels, strides);
  const auto stride = anchors.strides.unsqueeze(-1);
  const auto boxes = dist2bbox(dfl_decode(pred.narrow(-1, 0, 4 * reg_max), reg_max), anchors.points / stride) * stride;
  const auto scores = pred.narrow(-1, 4 * reg_max, nc).sigmoid();  // [B, A, C]
  const auto [best, cls] = at::max(scores, -1);                    // [B, A]
  multi_label = multi_label && nc > 1;                             // as Ultralytics: one class, one label
  std::vector<Detections> out;
  for (int64_t b = 0; b < pred.size(0); ++b) {
    at::Tensor bb, sc, cl;
    if (multi_label) {  // one candidate per (anchor, class) above the threshold, anchor-major as torch.where
      const auto pairs = scores[b].gt(conf_threshold).nonzero();  // [K, 2]: anchor, class
      const auto anchor = pairs.select(1, 0), klass = pairs.select(1, 1);
      bb = boxes[b].index_select(0, anchor);
      sc = scores[b].reshape(-1).index_select(0, anchor * nc + klass);
      cl = klass.contiguous();
    } else {
      const auto keep = best[b].gt(conf_threshold).nonzero().squeeze(1);
      bb = boxes[b].index_select(0, keep), sc = best[b].index_select(0, keep), cl = cls[b].index_select(0, keep);
    }
    if (max_nms > 0 && sc.size(0) > max_nms) {  // Ultralytics' excess boxes: the max_nms highest scores
      const auto top = sc.argsort(/*stable=*/true, /*dim=*/0, /*descending=*/true).narrow(0, 0, max_nms);
      bb = bb.index_select(0, top), sc = sc.index_select(0, top), cl = cl.index_select(0, top);
    }
    const auto kept = batched_nms(bb, sc, cl, iou_threshold, max_det).to(bb.device());
    out.push_back({bb.index_select(0, kept), sc.index_select(0, kept), cl.index_select(0, kept)});
  }
  return out;
}

}  // namespace meridian::detect
