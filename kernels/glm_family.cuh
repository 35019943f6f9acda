// The GLM families' rows on the device: each row's half deviance w d(y, mu) / 2
// with its first three derivatives in eta, for every family and link the CPU
// has (src/gam/family.rs, src/gam/link.rs, src/bms/numerics/probit.rs), in the
// same formulas and the same order of operations, so that the two agree to
// rounding (FMA contraction aside): log mu and log(1 - mu) of the binomial
// links without dividing a tiny probability again, the probit's tails by
// Cody's erfcx and a continued fraction, the cloglog's by series near 0,
// Poisson and Gamma in mu's relative derivatives.

typedef long long i64;

#define FAMILY_BINOMIAL 0
#define FAMILY_POISSON 1
#define FAMILY_GAUSSIAN 2
#define FAMILY_GAMMA 3

#define LINK_LOGIT 0
#define LINK_PROBIT 1
#define LINK_CLOGLOG 2
#define LINK_LOG 3
#define LINK_IDENTITY 4
#define LINK_INVERSE 5

// The constants as the CPU code spells them (each rounds to the same double).
#define GLM_LN_2 0.693147180559945309417232121458176568
#define GLM_LN_SQRT_2PI 0.91893853320467274178032973640562
#define GLM_FRAC_1_SQRT_2 0.707106781186547524400844362104849039
#define GLM_FRAC_1_SQRT_PI 0.56418958354775628694807945156077
#define GLM_SQRT_2_OVER_PI 0.79788456080286535587989211986876
// As src/bms/numerics/probit.rs's INV_SQRT_2PI (one ulp below the nearest double).
#define GLM_INV_SQRT_2PI 0.39894228040143265

// Cody's coefficients (src/bms/numerics/probit.rs).
__constant__ double CODY_A[5] = {3.16112374387056560e0, 1.13864154151050156e2, 3.77485237685302021e2,
                                 3.20937758913846947e3, 1.85777706184603153e-1};
__constant__ double CODY_B[4] = {2.36012909523441209e1, 2.44024637934444173e2, 1.28261652607737228e3,
                                 2.84423683343917062e3};
__constant__ double CODY_C[9] = {5.64188496988670089e-1, 8.88314979438837594e0, 6.61191906371416295e1,
                                 2.98635138197400131e2, 8.81952221241769090e2, 1.71204761263407058e3,
                                 2.05107837782607147e3, 1.23033935479799725e3, 2.15311535474403846e-8};
__constant__ double CODY_D[8] = {1.57449261107098347e1, 1.17693950891312499e2, 5.37181101862009858e2,
                                 1.62138957456669019e3, 3.29079923573345963e3, 4.36261909014324716e3,
                                 3.43936767414372164e3, 1.23033935480374942e3};
__constant__ double CODY_P[6] = {3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
                                 1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2};
__constant__ double CODY_Q[5] = {2.56852019228982242e0, 1.87295284992346047e0, 5.27905102951428412e-1,
                                 6.05183413124413191e-2, 2.33520497626869185e-3};

// erf(y) for |y| <= 0.46875 (Cody's A/B rational).
__device__ double glm_erf_small(double y)
{
    const double ysq = y * y;
    double num = CODY_A[4] * ysq, den = ysq;
    for (int i = 0; i < 3; ++i) {
        num = (num + CODY_A[i]) * ysq;
        den = (den + CODY_B[i]) * ysq;
    }
    return y * (num + CODY_A[3]) / (den + CODY_B[3]);
}

// erf(y) for 0 <= y <= 0.46875, erfcx(y) above (probit.rs's erf_or_erfcx).
__device__ double glm_erf_or_erfcx(double y)
{
    if (y <= 0.46875) return glm_erf_small(y);
    if (y <= 4.0) {
        double num = CODY_C[8] * y, den = y;
        for (int i = 0; i < 7; ++i) {
            num = (num + CODY_C[i]) * y;
            den = (den + CODY_D[i]) * y;
        }
        return (num + CODY_C[7]) / (den + CODY_D[7]);
    }
    const double ysq = 1.0 / (y * y);
    double num = CODY_P[5] * ysq, den = ysq;
    for (int i = 0; i < 4; ++i) {
        num = (num + CODY_P[i]) * ysq;
        den = (den + CODY_Q[i]) * ysq;
    }
    const double q = ysq * (num + CODY_P[4]) / (den + CODY_Q[4]);
    const double r = y >= 6.71e7 ? 0.0 : q;
    return (GLM_FRAC_1_SQRT_PI - r) / y;
}

__device__ double glm_erfcx(double y)
{
    if (isnan(y)) return y;
    if (fabs(y) <= 0.46875) return exp(y * y) * (1.0 - glm_erf_small(y));
    if (y > 0.0) return glm_erf_or_erfcx(y);
    return 2.0 * exp(y * y) - glm_erf_or_erfcx(-y);
}

// exp(-y^2) with y split on a 1/16 grid, so that y^2's rounding does not
// enter the exponent.
__device__ double glm_exp_neg_sq(double y)
{
    const double yh = trunc(16.0 * y) / 16.0;
    const double del = (y - yh) * (y + yh);
    return exp(-yh * yh) * exp(-del);
}

__device__ double glm_erfc(double y)
{
    if (isnan(y)) return y;
    const double ay = fabs(y);
    if (ay <= 0.46875) return 1.0 - glm_erf_small(y);
    const double upper = ay < 26.7 ? glm_exp_neg_sq(ay) * glm_erf_or_erfcx(ay) : 0.0;
    return y > 0.0 ? upper : 2.0 - upper;
}

__device__ double glm_norm_pdf(double x)
{
    if (isinf(x)) return 0.0;
    const double xh = trunc(16.0 * x) / 16.0;
    const double del = (x - xh) * (x + xh);
    return exp(-0.5 * xh * xh) * exp(-0.5 * del) * GLM_INV_SQRT_2PI;
}

__device__ double glm_norm_cdf(double x)
{
    if (x < 0.0)
        return 0.5 * glm_norm_pdf(x) / (GLM_FRAC_1_SQRT_2 * GLM_FRAC_1_SQRT_PI) * glm_erfcx(-x * GLM_FRAC_1_SQRT_2);
    return 1.0 - 0.5 * glm_erfc(x * GLM_FRAC_1_SQRT_2);
}

// log Phi(x) with its derivatives lambda, -C, -C' (link.rs's probit_log_jet):
// above x = -4 from (log Phi, lambda, C) as probit.rs's
// log_ndtr_mills_curvature gives them there, below from the continued
// fraction lambda = t + q, q = 1 / (t + r), r = 2 / (t + s), ...
__device__ void glm_probit_log_jet(double x, double* o)
{
    if (isnan(x)) {
        o[0] = o[1] = o[2] = o[3] = x;
        return;
    }
    if (x > -4.0) {
        double log_cdf, lambda;
        if (x < 0.0) {
            const double ex = glm_erfcx(-x * GLM_FRAC_1_SQRT_2);
            log_cdf = -0.5 * x * x + log(ex) - GLM_LN_2;
            lambda = GLM_SQRT_2_OVER_PI / ex;
        } else {
            const double upper = glm_norm_cdf(-x);
            log_cdf = log1p(-upper);
            lambda = glm_norm_pdf(x) / (1.0 - upper);
        }
        const double c = lambda * (x + lambda);
        const double dc = lambda * (1.0 - c) - c * (x + lambda);
        o[0] = log_cdf;
        o[1] = lambda;
        o[2] = -c;
        o[3] = -dc;
        return;
    }
    const double t = -x;
    double tail = t;
    for (int k = 160; k >= 4; --k) tail = t + (double)k / tail;
    const double s = 3.0 / tail;
    const double r = 2.0 / (t + s);
    const double q = 1.0 / (t + r);
    const double lambda = t + q;
    const double c = lambda * q;
    const double dc = c * (r - s) * r * q;
    o[0] = -0.5 * t * t - GLM_LN_SQRT_2PI - log(lambda);
    o[1] = lambda;
    o[2] = -c;
    o[3] = -dc;
}

// log(1 + e^x).
__device__ double glm_softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

// mu = 1 / (1 + e^-eta), 1 - mu and mu (1 - mu), without cancellation.
__device__ void glm_logistic(double eta, double* mu, double* one_minus, double* v)
{
    const double e = exp(-fabs(eta));
    const double big = 1.0 / (1.0 + e), small = e / (1.0 + e);
    *mu = eta >= 0.0 ? big : small;
    *one_minus = eta >= 0.0 ? small : big;
    *v = big * small;
}

// log(1 - e^-u) for u > 0; eta + log((1 - e^-u) / u) below u = 1e-5.
__device__ double glm_log1mexp(double u, double eta)
{
    if (u < 1e-5) return eta - 0.5 * u + u * u / 24.0;
    if (u <= GLM_LN_2) return log(-expm1(-u));
    return log1p(-exp(-u));
}

// (log mu, log(1 - mu)) with three derivatives each (a, b), for the links
// onto (0, 1) (link.rs's log_probabilities; its log_probability_pair gives
// the same values).
__device__ void glm_log_probabilities(int link, double eta, double* a, double* b)
{
    if (link == LINK_LOGIT) {
        double mu, om, v;
        glm_logistic(eta, &mu, &om, &v);
        const double d3 = -v * (om - mu);
        a[0] = -glm_softplus(-eta); a[1] = om; a[2] = -v; a[3] = d3;
        b[0] = -glm_softplus(eta); b[1] = -mu; b[2] = -v; b[3] = d3;
    } else if (link == LINK_PROBIT) {
        double lo[4];
        glm_probit_log_jet(eta, a);
        glm_probit_log_jet(-eta, lo);
        b[0] = lo[0]; b[1] = -lo[1]; b[2] = lo[2]; b[3] = -lo[3];
    } else { // cloglog, u = e^eta: log(1 - mu) = -u, each derivative -u
        const double u = exp(eta);
        b[0] = b[1] = b[2] = b[3] = -u;
        if (u > 750.0) {
            a[0] = a[1] = a[2] = a[3] = 0.0;
            return;
        }
        double bb, c;
        if (u < 0.1) {
            const double u2 = u * u;
            const double even =
                u2 * (1.0 / 12.0 - u2 * (1.0 / 720.0 - u2 * (1.0 / 30240.0 - u2 / 1209600.0)));
            c = 0.5 * u - even;
            bb = 1.0 - c;
        } else {
            bb = u / expm1(u);
            c = 1.0 - bb;
        }
        const double d2 = bb * (c - u);
        a[0] = glm_log1mexp(u, eta);
        a[1] = bb;
        a[2] = d2;
        a[3] = d2 * (c - u) - bb * (bb + u) * c;
    }
}

// x log y, 0 where x is 0.
__device__ double glm_xlogy(double x, double y)
{
    return x == 0.0 ? 0.0 : x * log(y);
}

// y a + f b with a zero coefficient's term 0 whatever its factor.
__device__ double glm_weighted(double y, double a, double f, double b)
{
    return (y == 0.0 ? 0.0 : y * a) + (f == 0.0 ? 0.0 : f * b);
}

__device__ double glm_binomial_value(double y, double m, double w, double a, double b)
{
    const double sat = glm_xlogy(y, y / m) + glm_xlogy(m - y, (m - y) / m);
    return w * (sat - glm_weighted(y, a, m - y, b));
}

// log mu (exact in eta for the log link).
__device__ double glm_log_mu(int link, double eta)
{
    if (link == LINK_LOG) return eta;
    if (link == LINK_IDENTITY) return log(eta);
    return -log(eta); // inverse (the probability links never reach here)
}

// mu = g^-1(eta) for the links of Poisson, Gaussian and Gamma.
__device__ double glm_linkinv(int link, double eta)
{
    if (link == LINK_LOG) return exp(eta);
    if (link == LINK_IDENTITY) return eta;
    return 1.0 / eta;
}

__device__ bool glm_in_domain(int link, double mu)
{
    return isfinite(mu) && (mu > 0.0 || (mu == 0.0 && link == LINK_LOG));
}

// w d(y, mu) / 2 for Poisson, Gaussian and Gamma (family.rs's power_value).
__device__ double glm_power_value(int family, int link, double y, double w, double mu, double eta)
{
    if (family == FAMILY_GAUSSIAN) return w * (y - mu) * (y - mu) / 2.0;
    if (!glm_in_domain(link, mu)) return nan("");
    if (family == FAMILY_POISSON) return w * (glm_xlogy(y, y) - y * glm_log_mu(link, eta) - (y - mu));
    const double r = (y - mu) / mu;
    const double log_ratio = fabs(r) < 0.5 ? log1p(r) : log(y) - glm_log_mu(link, eta);
    return w * (r - log_ratio);
}

// The row's value alone (family.rs's Family::neglog).
__device__ double glm_value(int family, int link, double y, double m, double w, double eta)
{
    if (w == 0.0) return 0.0;
    if (family == FAMILY_BINOMIAL) {
        double a[4], b[4];
        glm_log_probabilities(link, eta, a, b);
        return glm_binomial_value(y, m, w, a[0], b[0]);
    }
    return glm_power_value(family, link, y, w, glm_linkinv(link, eta), eta);
}

// The row's value and its first three derivatives in eta (family.rs's
// Family::neglog_jet).
__device__ void glm_jet(int family, int link, double y, double m, double w, double eta, double* o)
{
    if (w == 0.0) {
        o[0] = o[1] = o[2] = o[3] = 0.0;
        return;
    }
    if (family == FAMILY_BINOMIAL) {
        double a[4], b[4];
        glm_log_probabilities(link, eta, a, b);
        o[0] = glm_binomial_value(y, m, w, a[0], b[0]);
        for (int k = 1; k < 4; ++k) o[k] = -w * glm_weighted(y, a[k], m - y, b[k]);
        return;
    }
    if (family == FAMILY_GAUSSIAN) {
        // mu's derivatives for identity, log and inverse; e = y - mu.
        double d[4];
        if (link == LINK_LOG) {
            d[0] = d[1] = d[2] = d[3] = exp(eta);
        } else if (link == LINK_IDENTITY) {
            d[0] = eta; d[1] = 1.0; d[2] = 0.0; d[3] = 0.0;
        } else {
            const double mu = 1.0 / eta, mu2 = mu * mu;
            d[0] = mu; d[1] = -mu2; d[2] = 2.0 * mu2 * mu; d[3] = -6.0 * mu2 * mu2;
        }
        const double e = y - d[0];
        o[0] = glm_power_value(family, link, y, w, d[0], eta);
        o[1] = -w * e * d[1];
        o[2] = w * (d[1] * d[1] - e * d[2]);
        o[3] = w * (3.0 * d[1] * d[2] - e * d[3]);
        return;
    }
    // Poisson (V = mu) and Gamma (V = mu^2) in mu's relative derivatives q.
    double mu, q1, q2, q3;
    if (link == LINK_LOG) {
        mu = exp(eta); q1 = q2 = q3 = 1.0;
    } else if (link == LINK_IDENTITY) {
        mu = eta; q1 = 1.0 / eta; q2 = 0.0; q3 = 0.0;
    } else {
        mu = 1.0 / eta; q1 = -mu; q2 = 2.0 * mu * mu; q3 = -6.0 * mu * mu * mu;
    }
    if (!glm_in_domain(link, mu)) {
        o[0] = o[1] = o[2] = o[3] = nan("");
        return;
    }
    const double k = family == FAMILY_POISSON ? 1.0 : 2.0;
    const double e = y - mu;
    const double s = k == 1.0 ? 1.0 : pow(mu, 1.0 - k);
    const double h1 = q2 - k * q1 * q1;
    const double h2 = q3 - 3.0 * k * q1 * q2 + k * (k + 1.0) * q1 * q1 * q1;
    o[0] = glm_power_value(family, link, y, w, mu, eta);
    o[1] = -w * s * e * q1;
    o[2] = w * s * (mu * (q1 * q1 + h1) - y * h1);
    o[3] = w * s * (mu * (q1 * q2 + 2.0 * q1 * h1 + h2) - y * h2);
}
