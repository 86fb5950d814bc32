"""Real array API consumers on hurray tensors, checked against the same calls on NumPy:
scikit-learn with array_api_dispatch=True, array-api-compat and array-api-extra."""
import numpy as np

import hurray
import hurray.array_api as xp

from conftest import peer

array_api_compat = peer("array_api_compat")
xpx = peer("array_api_extra")
sklearn = peer("sklearn")


def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 5))
    y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(np.int64)
    return X, y


def test_array_api_compat_finds_the_namespace():
    t = xp.ones(3)
    assert array_api_compat.array_namespace(t) is xp
    assert array_api_compat.array_namespace(t, xp.zeros(2)) is xp
    assert array_api_compat.is_array_api_obj(t)


def test_array_api_extra_functions_match_numpy():
    X, _ = data()
    t = xp.asarray(X)
    np.testing.assert_allclose(np.asarray(xpx.cov(t.mT, xp=xp)), np.cov(X.T))
    np.testing.assert_array_equal(np.asarray(xpx.atleast_nd(xp.asarray(1.0), ndim=2, xp=xp)),
                                  np.atleast_2d(1.0))
    np.testing.assert_array_equal(np.asarray(xpx.pad(xp.asarray(X[:2]), 1, xp=xp)),
                                  np.pad(X[:2], 1))
    np.testing.assert_allclose(np.asarray(xpx.sinc(t[:3], xp=xp)), np.sinc(X[:3]))


def test_scikit_learn_estimators_with_array_api_dispatch():
    from sklearn import config_context
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.preprocessing import StandardScaler

    X, y = data()
    with config_context(array_api_dispatch=True):
        lda = LinearDiscriminantAnalysis().fit(xp.asarray(X), xp.asarray(y))
        pred = lda.predict(xp.asarray(X))
        pca = PCA(n_components=2, svd_solver="full").fit(xp.asarray(X))
        Z = pca.transform(xp.asarray(X))
        S = StandardScaler().fit_transform(xp.asarray(X))
    assert isinstance(pred, hurray.Tensor) and isinstance(Z, hurray.Tensor)
    np.testing.assert_array_equal(np.asarray(pred),
                                  LinearDiscriminantAnalysis().fit(X, y).predict(X))
    ref = PCA(n_components=2, svd_solver="full").fit(X)
    np.testing.assert_allclose(np.abs(np.asarray(Z)), np.abs(ref.transform(X)), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(S), StandardScaler().fit_transform(X))
