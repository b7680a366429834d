/* Plain C SPAM-L2 and SOLAM steps, written from docs/algorithms/spam.md (spam.3)-(spam.10) and
 * docs/algorithms/solam.md (solam.1)-(solam.10): the yardstick of bench/versus_c.py.
 *
 * Never shipped: bench/versus_c.py compiles this file with the system compiler at bench time and
 * calls it through ctypes on the same arrays as the numba kernels.  Each function is the same
 * computation as its kernel in core/_kernels/ (same state layout, same accumulators in the same
 * order), so the bench can check that both produce the same state before comparing speed.
 *
 * Conventions: row-major float64 X (n x d), labels int64 in {-1, +1}; the state is passed as the
 * kernel's arrays; `scores` may be NULL (no prequential scores).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double *w_unscaled, *w_scale, *avg_offset, *avg_coef, *sum_pos, *sum_neg;
    double *w_dot_sum_pos, *w_dot_sum_neg;
    int64_t *n_seen, *n_pos, *n_neg, *n_steps;
    double *sq_norm_sum;
} spam_state;

static double capped_rate(double rate, double curvature, double xx) {
    return rate * curvature * xx > 1.0 ? 1.0 / (curvature * xx) : rate;
}

static double mean_sq_norm(double sq_norm_sum, int64_t n_seen) {
    return sq_norm_sum > 0.0 ? sq_norm_sum / (double)n_seen : 1.0;
}

static void fold_scale(double *w, double *w_scale, double *avg_offset, double *avg_coef,
                       int64_t d, int average) {
    double scale = *w_scale;
    if (average) {
        double coef = *avg_coef;
        for (int64_t j = 0; j < d; j++) avg_offset[j] += coef * w[j];
        *avg_coef = 0.0;
    }
    for (int64_t j = 0; j < d; j++) w[j] *= scale;
    *w_scale = 1.0;
}

/* One SPAM step's scalars (docs/algorithms/spam.md (spam.3), (spam.7)): counts the step and
 * returns its coefficient on x (the capped rate times the gradient coefficient); *rho gets the
 * L2 prox factor 1 / (1 + eta l2). */
static double spam_step(spam_state s, int positive, double p, double w_dot_mean, double vx,
                        double xx, double eta0, double l2, double *rho) {
    *s.n_steps += 1;
    double eta = eta0 / sqrt((double)*s.n_steps);
    double nu = mean_sq_norm(*s.sq_norm_sum, *s.n_seen);
    double wx = *s.w_scale * vx;
    double coef = positive ? 2.0 * (1.0 - p) * (wx - w_dot_mean - 1.0)
                           : 2.0 * p * (wx - w_dot_mean + 1.0);
    double curvature = positive ? 2.0 * (1.0 - p) : 2.0 * p;
    *rho = 1.0 / (1.0 + eta * l2);
    return capped_rate(eta / nu, curvature, xx) * coef;
}

static double dot2(const double *a, const double *x, int64_t n) {
    double s0 = 0.0, s1 = 0.0;
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        s0 += a[j] * x[j];
        s1 += a[j + 1] * x[j + 1];
    }
    if (j < n) s0 += a[j] * x[j];
    return s0 + s1;
}

/* SPAM-L2 on dense rows, eta_t = eta0 / sqrt(t), averaged iterate (the defaults). */
void spam_l2_dense(const double *X, const int64_t *y, int64_t n, int64_t d, double *scores,
                   spam_state s, double eta0, double l2, int64_t n_warmup) {
    for (int64_t i = 0; i < n; i++) {
        const double *x = X + i * d;
        int positive = y[i] > 0;
        const double *opposite = positive ? s.sum_neg : s.sum_pos;
        double xx0 = 0, xx1 = 0, vx0 = 0, vx1 = 0, vo0 = 0, vo1 = 0, ax0 = 0, ax1 = 0;
        int64_t j = 0;
        for (; j + 2 <= d; j += 2) {
            double u = x[j], v = x[j + 1];
            xx0 += u * u;
            xx1 += v * v;
            vx0 += s.w_unscaled[j] * u;
            vx1 += s.w_unscaled[j + 1] * v;
            vo0 += opposite[j] * s.w_unscaled[j];
            vo1 += opposite[j + 1] * s.w_unscaled[j + 1];
            if (scores) {
                ax0 += s.avg_offset[j] * u;
                ax1 += s.avg_offset[j + 1] * v;
            }
        }
        if (j < d) {
            double u = x[j];
            xx0 += u * u;
            vx0 += s.w_unscaled[j] * u;
            vo0 += opposite[j] * s.w_unscaled[j];
            if (scores) ax0 += s.avg_offset[j] * u;
        }
        double xx = xx0 + xx1, vx = vx0 + vx1, v_dot_opposite = vo0 + vo1, ax = ax0 + ax1;
        if (scores) {
            double n_avg = (double)*s.n_steps;
            scores[i] = n_avg > 0.0 ? (ax + *s.avg_coef * vx) / n_avg : 0.0;
        }
        *s.n_seen += 1;
        *s.sq_norm_sum += xx;
        double *own = positive ? s.sum_pos : s.sum_neg;
        if (*s.n_seen > n_warmup && *s.n_pos > 0 && *s.n_neg > 0) {
            double p = (double)*s.n_pos / (double)(*s.n_pos + *s.n_neg);
            int64_t n_opposite = positive ? *s.n_neg : *s.n_pos;
            double w_dot_mean = *s.w_scale * v_dot_opposite / (double)n_opposite;
            double rho;
            double step = spam_step(s, positive, p, w_dot_mean, vx, xx, eta0, l2, &rho);
            if (*s.w_scale * rho < 1e-3)
                fold_scale(s.w_unscaled, s.w_scale, s.avg_offset, s.avg_coef, d, 1);
            double delta = -step / *s.w_scale;
            double new_scale = *s.w_scale * rho;
            double shift = *s.avg_coef * delta;
            for (int64_t k = 0; k < d; k++) {
                s.w_unscaled[k] += delta * x[k];
                s.avg_offset[k] -= shift * x[k];
                own[k] += x[k];
            }
            *s.avg_coef += new_scale;
            *s.w_scale = new_scale;
        } else {
            for (int64_t k = 0; k < d; k++) own[k] += x[k];
        }
        if (positive) *s.n_pos += 1; else *s.n_neg += 1;
    }
    *s.w_dot_sum_pos = *s.w_scale * dot2(s.w_unscaled, s.sum_pos, d);
    *s.w_dot_sum_neg = *s.w_scale * dot2(s.w_unscaled, s.sum_neg, d);
}

/* SPAM-L2 on CSR rows, O(nnz) per event: `table` is (4, d) row-major, rows w_unscaled,
 * avg_offset, class_sum_neg, class_sum_pos (the kernel's layout for models narrower than
 * 16,384 features); the scalars of spam_state other than the vectors are used. */
void spam_l2_csr(const int64_t *indptr, const int64_t *indices, const double *data,
                 const int64_t *y, int64_t n, int64_t d, double *scores, double *table,
                 int64_t row_stride, int64_t column_stride, spam_state s, double eta0,
                 double l2, int64_t n_warmup) {
#define W(j) table[(j) * column_stride]
#define AVG(j) table[row_stride + (j) * column_stride]
#define NEG(j) table[2 * row_stride + (j) * column_stride]
#define POS(j) table[3 * row_stride + (j) * column_stride]
    for (int64_t i = 0; i < n; i++) {
        int64_t start = indptr[i], end = indptr[i + 1];
        double xx = 0, vx = 0, ax = 0, x_pos = 0, x_neg = 0;
        for (int64_t k = start; k < end; k++) {
            int64_t j = indices[k];
            double value = data[k];
            xx += value * value;
            vx += W(j) * value;
            x_neg += NEG(j) * value;
            x_pos += POS(j) * value;
            if (scores) ax += AVG(j) * value;
        }
        if (scores) {
            double n_avg = (double)*s.n_steps;
            scores[i] = n_avg > 0.0 ? (ax + *s.avg_coef * vx) / n_avg : 0.0;
        }
        *s.n_seen += 1;
        *s.sq_norm_sum += xx;
        int positive = y[i] > 0;
        int step_taken = 0;
        double delta = 0.0, shift = 0.0;
        if (*s.n_seen > n_warmup && *s.n_pos > 0 && *s.n_neg > 0) {
            step_taken = 1;
            double p = (double)*s.n_pos / (double)(*s.n_pos + *s.n_neg);
            double w_dot_mean = positive ? *s.w_dot_sum_neg / (double)*s.n_neg
                                         : *s.w_dot_sum_pos / (double)*s.n_pos;
            double rho;
            double step = spam_step(s, positive, p, w_dot_mean, vx, xx, eta0, l2, &rho);
            *s.w_dot_sum_pos = rho * (*s.w_dot_sum_pos - step * x_pos);
            *s.w_dot_sum_neg = rho * (*s.w_dot_sum_neg - step * x_neg);
            if (*s.w_scale * rho < 1e-3) {
                vx *= *s.w_scale;
                double scale = *s.w_scale;
                for (int64_t j = 0; j < d; j++) AVG(j) += *s.avg_coef * W(j);
                *s.avg_coef = 0.0;
                for (int64_t j = 0; j < d; j++) W(j) *= scale;
                *s.w_scale = 1.0;
            }
            delta = -step / *s.w_scale;
            double new_scale = *s.w_scale * rho;
            shift = *s.avg_coef * delta;
            *s.avg_coef += new_scale;
            *s.w_scale = new_scale;
            vx += delta * xx;
        }
        int64_t own = (positive ? 3 : 2) * row_stride;
        if (positive) {
            *s.n_pos += 1;
            *s.w_dot_sum_pos += *s.w_scale * vx;
        } else {
            *s.n_neg += 1;
            *s.w_dot_sum_neg += *s.w_scale * vx;
        }
        if (step_taken) {
            for (int64_t k = start; k < end; k++) {
                int64_t j = indices[k];
                W(j) += delta * data[k];
                AVG(j) -= shift * data[k];
                table[own + j * column_stride] += data[k];
            }
        } else {
            for (int64_t k = start; k < end; k++) table[own + indices[k] * column_stride] += data[k];
        }
    }
#undef W
#undef AVG
#undef NEG
#undef POS
}

/* regSOLAM on dense rows (docs/algorithms/solam.md), averaged iterate, kappa estimated online
 * when kappa <= 0.  `scalars` = w_scale, w_sq_norm, a, b, alpha, avg_coef, avg_a, avg_b,
 * avg_alpha, gamma_sum, sq_norm_sum, max_norm (the kernel's arrays of shape (1,), in that
 * order); `counts` = n_seen, n_pos. */
static double clip(double value, double bound) {
    return value < -bound ? -bound : (value > bound ? bound : value);
}

void solam_dense(const double *X, const int64_t *y, int64_t n, int64_t d, double *scores,
                 double *w, double *avg_offset, double **scalars, int64_t **counts,
                 double eta0, double l2, double radius, double kappa_setting) {
    double *w_scale = scalars[0], *w_sq_norm = scalars[1], *a = scalars[2], *b = scalars[3];
    double *alpha = scalars[4], *avg_coef = scalars[5], *avg_a = scalars[6];
    double *avg_b = scalars[7], *avg_alpha = scalars[8], *gamma_sum = scalars[9];
    double *sq_norm_sum = scalars[10], *max_norm = scalars[11];
    int64_t *n_seen = counts[0], *n_pos = counts[1];
    for (int64_t i = 0; i < n; i++) {
        const double *x = X + i * d;
        double xx0 = 0, xx1 = 0, vx0 = 0, vx1 = 0, ww0 = 0, ww1 = 0, ax0 = 0, ax1 = 0;
        int64_t j = 0;
        for (; j + 2 <= d; j += 2) {
            double u = x[j], v = x[j + 1];
            xx0 += u * u;
            xx1 += v * v;
            vx0 += w[j] * u;
            vx1 += w[j + 1] * v;
            ww0 += w[j] * w[j];
            ww1 += w[j + 1] * w[j + 1];
            if (scores) {
                ax0 += avg_offset[j] * u;
                ax1 += avg_offset[j + 1] * v;
            }
        }
        if (j < d) {
            double u = x[j];
            xx0 += u * u;
            vx0 += w[j] * u;
            ww0 += w[j] * w[j];
            if (scores) ax0 += avg_offset[j] * u;
        }
        double xx = xx0 + xx1, vx = vx0 + vx1, ax = ax0 + ax1;
        *w_sq_norm = ww0 + ww1;
        if (scores) scores[i] = *gamma_sum > 0.0 ? (ax + *avg_coef * vx) / *gamma_sum : 0.0;
        /* solam_step */
        int positive = y[i] > 0;
        *n_seen += 1;
        if (positive) *n_pos += 1;
        *sq_norm_sum += xx;
        if (xx > *max_norm * *max_norm) *max_norm = sqrt(xx);
        int64_t t = *n_seen;
        double q = (double)*n_pos / (double)t;
        double nu = mean_sq_norm(*sq_norm_sum, t);
        double inv_root_nu = 1.0 / sqrt(nu);
        double gamma = eta0 / sqrt((double)t);
        double kappa = kappa_setting <= 0.0 ? *max_norm * inv_root_nu : kappa_setting;
        double s = *w_scale * vx;
        double curvature, coef_w, grad_a, grad_b, grad_alpha;
        if (positive) {
            curvature = 2.0 * (1.0 - q);
            coef_w = 2.0 * (1.0 - q) * (s - *a) - 2.0 * (1.0 + *alpha) * (1.0 - q);
            grad_a = -2.0 * (1.0 - q) * (s - *a);
            grad_b = 0.0;
            grad_alpha = -2.0 * (1.0 - q) * s - 2.0 * q * (1.0 - q) * *alpha;
        } else {
            curvature = 2.0 * q;
            coef_w = 2.0 * q * (s - *b) + 2.0 * (1.0 + *alpha) * q;
            grad_a = 0.0;
            grad_b = -2.0 * q * (s - *b);
            grad_alpha = 2.0 * q * s - 2.0 * q * (1.0 - q) * *alpha;
        }
        *avg_coef += *w_scale;
        *avg_a += *a;
        *avg_b += *b;
        *avg_alpha += *alpha;
        *gamma_sum += 1.0;
        double bound = radius * kappa;
        *a = clip(*a - gamma * grad_a, bound);
        *b = clip(*b - gamma * grad_b, bound);
        *alpha = clip(*alpha + gamma * grad_alpha, 2.0 * bound);
        double shrink = 1.0 - gamma * l2;
        double step = capped_rate(gamma / nu, curvature, xx) * coef_w;
        double limit = radius * inv_root_nu;
        /* the vector update */
        if (fabs(*w_scale * shrink) < 1e-3) {
            *w_scale *= shrink;
            shrink = 1.0;
            vx *= *w_scale;
            fold_scale(w, w_scale, avg_offset, avg_coef, d, 1);
            *w_sq_norm = dot2(w, w, d);
        }
        double delta = -step / (*w_scale * shrink);
        *w_sq_norm += delta * (2.0 * vx + delta * xx);
        double shift = *avg_coef * delta;
        for (int64_t k = 0; k < d; k++) {
            w[k] += delta * x[k];
            avg_offset[k] -= shift * x[k];
        }
        *w_scale *= shrink;
        if (*w_sq_norm < 0.0) *w_sq_norm = 0.0;
        double sq_norm = *w_scale * *w_scale * *w_sq_norm;
        if (sq_norm > limit * limit) *w_scale *= limit / sqrt(sq_norm);
    }
}

/* regSOLAM on CSR rows, O(nnz) per event (as solam_dense, plus a rare O(n_features) fold):
 * `table` is (2, d), rows w_unscaled and avg_offset, with the strides of spam_l2_csr's. */
void solam_csr(const int64_t *indptr, const int64_t *indices, const double *data,
               const int64_t *y, int64_t n, int64_t d, double *scores, double *table,
               int64_t row_stride, int64_t column_stride, double **scalars, int64_t **counts,
               double eta0, double l2, double radius, double kappa_setting) {
#define W(j) table[(j) * column_stride]
#define AVG(j) table[row_stride + (j) * column_stride]
    double *w_scale = scalars[0], *w_sq_norm = scalars[1], *a = scalars[2], *b = scalars[3];
    double *alpha = scalars[4], *avg_coef = scalars[5], *avg_a = scalars[6];
    double *avg_b = scalars[7], *avg_alpha = scalars[8], *gamma_sum = scalars[9];
    double *sq_norm_sum = scalars[10], *max_norm = scalars[11];
    int64_t *n_seen = counts[0], *n_pos = counts[1];
    for (int64_t i = 0; i < n; i++) {
        int64_t start = indptr[i], end = indptr[i + 1];
        double xx = 0, vx = 0, ax = 0;
        for (int64_t k = start; k < end; k++) {
            double value = data[k];
            xx += value * value;
            vx += W(indices[k]) * value;
            if (scores) ax += AVG(indices[k]) * value;
        }
        if (scores) scores[i] = *gamma_sum > 0.0 ? (ax + *avg_coef * vx) / *gamma_sum : 0.0;
        int positive = y[i] > 0;
        *n_seen += 1;
        if (positive) *n_pos += 1;
        *sq_norm_sum += xx;
        if (xx > *max_norm * *max_norm) *max_norm = sqrt(xx);
        int64_t t = *n_seen;
        double q = (double)*n_pos / (double)t;
        double nu = mean_sq_norm(*sq_norm_sum, t);
        double inv_root_nu = 1.0 / sqrt(nu);
        double gamma = eta0 / sqrt((double)t);
        double kappa = kappa_setting <= 0.0 ? *max_norm * inv_root_nu : kappa_setting;
        double s = *w_scale * vx;
        double curvature, coef_w, grad_a, grad_b, grad_alpha;
        if (positive) {
            curvature = 2.0 * (1.0 - q);
            coef_w = 2.0 * (1.0 - q) * (s - *a) - 2.0 * (1.0 + *alpha) * (1.0 - q);
            grad_a = -2.0 * (1.0 - q) * (s - *a);
            grad_b = 0.0;
            grad_alpha = -2.0 * (1.0 - q) * s - 2.0 * q * (1.0 - q) * *alpha;
        } else {
            curvature = 2.0 * q;
            coef_w = 2.0 * q * (s - *b) + 2.0 * (1.0 + *alpha) * q;
            grad_a = 0.0;
            grad_b = -2.0 * q * (s - *b);
            grad_alpha = 2.0 * q * s - 2.0 * q * (1.0 - q) * *alpha;
        }
        *avg_coef += *w_scale;
        *avg_a += *a;
        *avg_b += *b;
        *avg_alpha += *alpha;
        *gamma_sum += 1.0;
        double bound = radius * kappa;
        *a = clip(*a - gamma * grad_a, bound);
        *b = clip(*b - gamma * grad_b, bound);
        *alpha = clip(*alpha + gamma * grad_alpha, 2.0 * bound);
        double shrink = 1.0 - gamma * l2;
        double step = capped_rate(gamma / nu, curvature, xx) * coef_w;
        double limit = radius * inv_root_nu;
        if (fabs(*w_scale * shrink) < 1e-3) {
            *w_scale *= shrink;
            shrink = 1.0;
            vx *= *w_scale;
            double scale = *w_scale, coef = *avg_coef;
            for (int64_t j = 0; j < d; j++) AVG(j) += coef * W(j);
            *avg_coef = 0.0;
            for (int64_t j = 0; j < d; j++) W(j) *= scale;
            *w_scale = 1.0;
            double s0 = 0.0, s1 = 0.0;
            int64_t j = 0;
            for (; j + 2 <= d; j += 2) {
                s0 += W(j) * W(j);
                s1 += W(j + 1) * W(j + 1);
            }
            if (j < d) s0 += W(j) * W(j);
            *w_sq_norm = s0 + s1;
        }
        double delta = -step / (*w_scale * shrink);
        *w_sq_norm += delta * (2.0 * vx + delta * xx);
        double shift = *avg_coef * delta;
        for (int64_t k = start; k < end; k++) {
            W(indices[k]) += delta * data[k];
            AVG(indices[k]) -= shift * data[k];
        }
        *w_scale *= shrink;
        if (*w_sq_norm < 0.0) *w_sq_norm = 0.0;
        double sq_norm = *w_scale * *w_scale * *w_sq_norm;
        if (sq_norm > limit * limit) *w_scale *= limit / sqrt(sq_norm);
    }
#undef W
#undef AVG
}
